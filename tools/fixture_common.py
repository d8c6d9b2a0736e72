"""Helpers shared by the fixture scripts that run transformers itself in float64:
make_families_2026_fixtures.py, make_hybrid_fixtures.py and make_mamba2_fixtures.py.

Not a script; it writes nothing by itself. A script built on start / save_model / done_files
writes, relative to the repository root (the parent of this file's folder), for each <name> of
its NAMES and nothing else:

  tests/fixtures/models/<name>/                 XForCausalLM(config).save_pretrained (f32
                                                weights, config.json, generation_config.json)
                                                plus make_fixtures.py's tokenizer.json
  tests/fixtures/reference/<name>.safetensors   in make_fixtures.py's format: input_ids [3, 20]
                                                (the same ids as every fixture), logits, and per
                                                captured layer pattern, q, k, attn_scores
  tests/fixtures/reference/<name>.metrics.json  every metric (make_fixtures.write_reference)
  tests/fixtures/reference/<name>.logit_key.json  (make_logit_key_fixtures.py, run at the end)

What is here:

  patching      patched (set attributes for a while), recording (record each forward call of
                a class), from_source (a transformers function or method recompiled from its
                own source with exact text replacements: the precision-only patches)
  a main()      start (deterministic setup, old outputs removed, make_fixtures.py's
                tokenizer and input ids, both checked against llama_gqa's), save_model
                (save_pretrained + tokenizer.json, the saved config and tensor shapes),
                done_files (temporary folder removed, files made 0644), report (the
                printed self-checks and fixture summary)
  hybrids       eager_capture / float64_rope / add_patterns (the float64 eager attention that
                captures only the softmax-attention layers), hybrid_metrics (metrics.json's
                "attention_layers"), logit_key_sum_to_one (make_logit_key_fixtures.py on
                names it does not list yet)
  checks        router_logits64 / topk_margin (routing re-derived in float64) and the numpy
                float64 pieces np_silu, np_sigmoid, np_softplus, np_rms, np_rope_half,
                np_attention

Paths and sizes are make_fixtures.py's (MODELS, REFS, B, T, ...).
"""

import contextlib
import inspect
import json
import math
import os
import re
import shutil
import sys
import tempfile
import textwrap

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import safe_open

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402
import make_logit_key_fixtures as lk  # noqa: E402

import transformers  # noqa: E402

TORCH64 = mf.TORCH64


# ----------------------------------------------------------------------------
# Patching (nothing in transformers is edited)
# ----------------------------------------------------------------------------
@contextlib.contextmanager
def patched(*triples):
    """Sets (obj, attr, value) for the duration, restoring the old values after."""
    saved = [(obj, attr, getattr(obj, attr)) for obj, attr, _ in triples]
    for obj, attr, val in triples:
        setattr(obj, attr, val)
    try:
        yield
    finally:
        for obj, attr, val in reversed(saved):
            setattr(obj, attr, val)


@contextlib.contextmanager
def recording(cls, what):
    """Wraps cls.forward (whatever it is now) to record what(self, args, kwargs, out) of each
    call, in call order."""
    calls = []
    inner = cls.forward

    def forward(self, *args, **kwargs):
        out = inner(self, *args, **kwargs)
        calls.append(what(self, args, kwargs, out))
        return out

    with patched((cls, "forward", forward)):
        yield calls


def from_source(fn, replacements, strip_decorators=False):
    """fn (a function or method of transformers) re-compiled from its own source in its own
    module, each (old, new) or (old, new, count) of `replacements` applied, `old` found exactly
    once (or `count` times): the precision-only changes. Its decorators are re-applied unless
    strip_decorators."""
    fn = inspect.unwrap(fn)
    src = textwrap.dedent(inspect.getsource(fn))
    if strip_decorators:
        src = re.sub(r"\A(@[^\n]*\n)+", "", src)
    for old, new, *count in replacements:
        want = count[0] if count else 1
        assert src.count(old) == want, (fn.__qualname__, old, src.count(old), "transformers' source changed")
        src = src.replace(old, new)
    mod = sys.modules[fn.__module__]
    ns = {}
    exec(compile(src, mod.__file__, "exec"), mod.__dict__, ns)
    return ns[fn.__name__]


# ----------------------------------------------------------------------------
# The common parts of a fixture script's main()
# ----------------------------------------------------------------------------
def start(names):
    """One deterministic CPU thread, the versions printed, every earlier output of `names`
    removed; make_fixtures.py's tokenizer saved in a temporary folder (checked byte-equal to
    llama_gqa's tokenizer.json) and its input ids [B, T] (checked equal to llama_gqa's
    reference). Returns (tmp folder, tokenizer.json path, ids, make_fixtures.common_cfg)."""
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    for name in names:
        d = os.path.join(mf.MODELS, name)
        if os.path.isdir(d):
            shutil.rmtree(d)
        for ext in (".safetensors", ".metrics.json", ".logit_key.json"):
            p = os.path.join(mf.REFS, name + ext)
            if os.path.exists(p):
                os.remove(p)

    tok, bos, eos = mf.build_tokenizer()
    tmp = tempfile.mkdtemp()
    tok_json = os.path.join(tmp, "tokenizer.json")
    tok.save(tok_json)
    with open(tok_json, "rb") as f, open(os.path.join(mf.MODELS, "llama_gqa", "tokenizer.json"), "rb") as g:
        assert f.read() == g.read(), "the tokenizer differs from make_fixtures.py's"

    g = torch.Generator().manual_seed(mf.SEED_IDS)
    ids = torch.randint(0, mf.VOCAB, (mf.B, mf.T), generator=g, dtype=torch.int64)
    with safe_open(os.path.join(mf.REFS, "llama_gqa.safetensors"), framework="pt") as f:
        assert torch.equal(f.get_tensor("input_ids"), ids), "input ids differ from make_fixtures.py's"
    return tmp, tok_json, ids, mf.common_cfg(bos, eos)


def state_keys(d):
    with safe_open(os.path.join(d, "model.safetensors"), framework="pt") as f:
        return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}


def save_model(name, model, tok_json, object_hook=None):
    """model.save_pretrained into tests/fixtures/models/<name>/ plus the tokenizer. Returns (the
    folder, its config.json read with object_hook, {tensor name: shape})."""
    d = os.path.join(mf.MODELS, name)
    model.save_pretrained(d)
    shutil.copy(tok_json, os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "config.json")) as f:
        return d, json.load(f, object_hook=object_hook), state_keys(d)


def done_files(names, tmp):
    """The temporary folder removed; every file written for `names` made 0644."""
    shutil.rmtree(tmp)
    for name in names:  # save_pretrained / safetensors create files 0600
        for dp, _, fns in os.walk(os.path.join(mf.MODELS, name)):
            for fn in fns:
                os.chmod(os.path.join(dp, fn), 0o644)
        for ext in (".safetensors", ".metrics.json"):
            os.chmod(os.path.join(mf.REFS, name + ext), 0o644)


def report(checks, summary):
    """Prints the self-check lines and, per fixture of summary [(name, peak, margin, metrics,
    info, logits difference)], its figures, asserting each fixture's pattern peaks, sink
    importance margin and folder size."""
    print("\nself-checks:")
    for c in checks:
        print("  " + c)
    print("\nfixtures:")
    for name, peak, margin, M, info, d32 in summary:
        assert peak > 0.3, (name, peak)
        assert margin > 1e-3, (name, "sink importance too close to threshold", margin)
        size = sum(os.path.getsize(os.path.join(dp, fn))
                   for dp, _, fns in os.walk(os.path.join(mf.MODELS, name)) for fn in fns)
        assert size < 500_000, (name, size)
        print(f"  {name}: peaked rows (i>=3, max p>0.3) {peak:.3f}; sink_rate {M['sink_rate']['rate']:.3f} "
              f"(min |importance-0.3| {margin:.3f}); nll {M['nll']['mean']:.4f}; f32 vs f64 logits "
              f"{d32:.2e}; model dir {size} bytes;{info}")


# ----------------------------------------------------------------------------
# Hybrid models: transformers in float64 capturing the softmax-attention layers only
# (make_fixtures.transformers64_reference, adapted: it asserts one capture per decoder layer)
# ----------------------------------------------------------------------------
def eager_capture(mod, caps, layers):
    """A float64 stand-in for `mod`.eager_attention_forward: appends each call's q, k (post
    QK-norm and RoPE, before any GQA repeat), scaled causal logits (attn_scores) and softmax to
    caps, and the attention module's layer_idx to layers. Plain causal masks only."""

    def eager64(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        groups = getattr(module, "num_key_value_groups", 1)
        keys = mod.repeat_kv(key, groups) if groups > 1 else key
        values = mod.repeat_kv(value, groups) if groups > 1 else value
        scores, visible = mf.eager_scores(query, keys, attention_mask, scaling, kwargs.get("softcap"))
        masked = scores.masked_fill(~visible, float("-inf"))
        weights = F.softmax(masked, dim=-1)
        assert torch.equal(visible, torch.ones_like(visible).tril()), "not plain causal"
        caps.append({"q": query.detach().clone(), "k": key.detach().clone(),
                     "attn_scores": masked.detach().clone(), "softmax": weights.detach().clone()})
        layers.append(module.layer_idx)
        out = torch.matmul(weights, values).transpose(1, 2).contiguous()
        return out, weights

    return eager64


def float64_rope(model):
    """The model's RoPE inv_freq (default rope_type, partial_rotary_factor honoured) replaced by
    float64 values from its config, checked against transformers' own. Returns the rotary
    module (None, untouched, where the model has none: NoPE)."""
    rotary = model.model.rotary_emb
    if rotary is None:
        return None
    cfg = model.config
    assert cfg.rope_parameters.get("rope_type", "default") == "default", cfg.rope_parameters
    head = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    dim = int(head * cfg.rope_parameters.get("partial_rotary_factor", 1.0))
    inv64 = 1.0 / (cfg.rope_parameters["rope_theta"] ** (torch.arange(0, dim, 2, dtype=TORCH64) / dim))
    assert (rotary.inv_freq.to(TORCH64) - inv64).abs().max() < 1e-7, (rotary.inv_freq, inv64)
    rotary.inv_freq = inv64.clone()
    rotary.original_inv_freq = inv64.clone()
    return rotary


def add_patterns(caps, out):
    """Each cap's "pattern": the float64 attention weights transformers returned."""
    assert len(caps) == len(out.attentions), (len(caps), len(out.attentions))
    for c, a in zip(caps, out.attentions):
        assert a.dtype == TORCH64
        c["pattern"] = a.detach()
    assert out.logits.dtype == TORCH64


def hybrid_metrics(name, M, attention_layers, logit_fn=None):
    """The hybrid convention: metrics.json M (as make_fixtures.write_reference wrote it) gets
    "attention_layers", the 1-based decoder layers that layers.{a} / every per-layer array
    stand for, placed after "model" and "variant"; rewritten and re-checked with Python loops.
    Returns (M, a line for the log)."""
    M = {**{k: M[k] for k in ("model", "variant")}, "attention_layers": list(attention_layers),
         **{k: v for k, v in M.items() if k not in ("model", "variant")}}
    mf.write_json(os.path.join(mf.REFS, f"{name}.metrics.json"), M)
    worst = mf.crosscheck_metrics(name, "softmax", None, logit_fn)
    return M, (f"{name}: metrics.json with attention_layers {M['attention_layers']} re-checked with Python "
               f"loops, max diff {worst[0]:.1e}; heatmap / query_profile layer {M['heatmap']['layer']} of the "
               f"captured layers = decoder layer {M['attention_layers'][M['heatmap']['layer'] - 1]}")


@contextlib.contextmanager
def logit_key_sum_to_one(names):
    """make_logit_key_fixtures.py's check_outputs treats a fixture missing from its SUM_TO_ONE
    set as Affine-Scaled (it reads model.layers.{l}.self_attn.alpha_ma): until `names` are
    added to its FIXTURES and SUM_TO_ONE, they are added here, in memory, for the duration."""
    absent = [n for n in names if n not in lk.SUM_TO_ONE]
    if absent:
        print(f"NOTE: {absent} not in make_logit_key_fixtures.SUM_TO_ONE / FIXTURES; added in memory for this run")
    with patched((lk, "SUM_TO_ONE", set(lk.SUM_TO_ONE) | set(names))):
        yield


# ----------------------------------------------------------------------------
# Independent checks: routing in float64, numpy float64 pieces
# ----------------------------------------------------------------------------
def router_logits64(router, x):
    """A router's logits in float64: its input flattened to [tokens, hidden], times W^T."""
    return x.reshape(-1, x.shape[-1]).to(TORCH64) @ router.weight.detach().to(TORCH64).T


def topk_margin(v, k):
    """The smallest gap, over the rows of v [tokens, experts], between the k-th largest value
    and the next: how clear every top-k choice is."""
    vs = v.sort(dim=-1, descending=True).values
    return (vs[:, k - 1] - vs[:, k]).min().item()


def np_silu(x):
    return x / (1.0 + np.exp(-x))


def np_sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def np_softplus(x):  # torch's F.softplus (beta 1, threshold 20)
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def np_rms(x, w, eps):
    return w * (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps))


def np_rope_half(x, pos, theta, rot):
    """Half-split RoPE on the first `rot` dims of x [B, H, T, D]; the rest passes."""
    inv = 1.0 / (theta ** (np.arange(0, rot, 2, dtype=np.float64) / rot))
    ang = pos[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang), np.cos(ang)], -1)
    sin = np.concatenate([np.sin(ang), np.sin(ang)], -1)
    xr, xp = x[..., :rot], x[..., rot:]
    rh = np.concatenate([-xr[..., rot // 2:], xr[..., :rot // 2]], -1)
    return np.concatenate([xr * cos + rh * sin, xp], -1)


def np_attention(q, k, v, scale=None):
    """q [B, H, T, D], k / v [B, KV, T, D]: causal softmax attention of the logits q.k x scale
    (None: q.k / sqrt(D)), [B, T, H*D]."""
    Bn, H, Tn, D = q.shape
    rep = H // k.shape[1]
    kr, vr = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = np.einsum("bhid,bhjd->bhij", q, kr)
    s = s / math.sqrt(D) if scale is None else s * scale
    s = np.where(np.tril(np.ones((Tn, Tn), dtype=bool)), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    return np.einsum("bhij,bhjd->bhid", p, vr).transpose(0, 2, 1, 3).reshape(Bn, Tn, H * D)
