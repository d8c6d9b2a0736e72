#!/usr/bin/env python3
"""Independent PyTorch / transformers reference for asa-analyze.

Writes, relative to the repository root (the parent of this file's folder):

  tests/fixtures/models/<name>/       tiny Hugging Face checkpoints
  tests/fixtures/reference/<name>.safetensors, <name>.metrics.json
  tests/fixtures/corpus/              tiny corpus + packing reference

Everything is deterministic (fixed seeds).  All reference numbers are float64.
See tools/README.md and /work/shared/SPEC.md sections 2, 2b, 3, 4.

Run:  ~/.cache/asa-tools/bin/python tools/make_fixtures.py
"""

import contextlib
import json
import math
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

import transformers
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    Olmo2Config,
    Olmo2ForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
    Gemma2Config,
    Gemma2ForCausalLM,
    Gemma3TextConfig,
    Gemma3ForCausalLM,
    Gemma3Config,
    Gemma3ForConditionalGeneration,
    SiglipVisionConfig,
    GptOssConfig,
    GptOssForCausalLM,
)
from transformers.models.gpt2 import modeling_gpt2
from transformers.models.gpt_neox import modeling_gpt_neox
from transformers.models.llama import modeling_llama
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.mixtral import modeling_mixtral
from transformers.models.qwen3_moe import modeling_qwen3_moe
from transformers.models.gemma2 import modeling_gemma2
from transformers.models.gemma3 import modeling_gemma3
from transformers.models.gpt_oss import modeling_gpt_oss
from transformers.integrations.mxfp4 import FP4_VALUES, convert_moe_packed_tensors
from transformers.models.olmo2 import modeling_olmo2
from transformers.models.phi3 import modeling_phi3
from transformers.models.mistral import modeling_mistral
from transformers.models.qwen2 import modeling_qwen2
from transformers.models.qwen3 import modeling_qwen3

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures")
MODELS = os.path.join(FIX, "models")
REFS = os.path.join(FIX, "reference")
CORPUS = os.path.join(FIX, "corpus")

# ----------------------------------------------------------------------------
# Shapes and analysis options
# ----------------------------------------------------------------------------
HIDDEN = 32
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 8
INTER = 64
LAYERS = 2
VOCAB = 64
MAX_POS = 64
EPS = 1e-5
INIT_STD = 0.2

B = 3  # sequences
T = 20  # tokens per sequence
MIN_QUERY = 1
HEATMAP_LAYER = 2  # 1-based; default 8 clipped to depth 2
HEATMAP_SIZE = min(30, T)
PROFILE_QUERY = T - 1
BINS = 20
SINK_EPS = 0.3
BANDS = ["first", "0", "1-10", "10-100"]
QWEN3_HEAD_DIM = 12  # qwen3 fixture: head_dim != HIDDEN / HEADS
SI_HEAD_DIM = 16  # scale_invariant fixture: p-RoPE with p = 0.5 rotates 4 of 8 pairs
SI_TAU = 10.0

SEED_IDS = 1234

TORCH64 = torch.float64


# ----------------------------------------------------------------------------
# Tokenizer
# ----------------------------------------------------------------------------
TOKENIZER_TEXT = [
    "The cat sat on the mat, and the dog sat on the log. The cat and the dog are friends.",
    "A model reads a long text one token at a time. Attention lets each token look back at the "
    "tokens that came before it, and the first token often takes a large share of that attention.",
    "In the morning the sun rose over the hills. The river ran past the old mill, and the birds "
    "sang in the trees near the water.",
    "We train small models on short texts and then we look at the attention maps, the entropy of "
    "each head, and the sum of the weights of every query.\nThe numbers tell us what the change did.",
]
# Characters the tokenizer knows (after lowercasing). Anything else becomes <unk>.
ALPHABET = list("abcdefghijklmnopqrstuvwxyz.,\n") + ["\u2581"]
SPECIALS = ["<unk>", "<s>", "</s>"]


def build_tokenizer():
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=ALPHABET,
        limit_alphabet=len(ALPHABET),
        min_frequency=1,
        show_progress=False,
    )
    tok.train_from_iterator(TOKENIZER_TEXT, trainer=trainer)
    # A post-processor that adds nothing (no automatic BOS / EOS).
    tok.post_processor = processors.TemplateProcessing(single="$A:0", pair="$A:0 $B:1", special_tokens=[])
    assert tok.get_vocab_size() <= VOCAB, tok.get_vocab_size()
    bos = tok.token_to_id("<s>")
    eos = tok.token_to_id("</s>")
    unk = tok.token_to_id("<unk>")
    assert (unk, bos, eos) == (0, 1, 2), (unk, bos, eos)
    enc = tok.encode("The cat sat.")
    assert bos not in enc.ids and eos not in enc.ids
    assert unk not in tok.encode(" ".join(TOKENIZER_TEXT)).ids
    return tok, bos, eos


# ----------------------------------------------------------------------------
# Configs and weights
# ----------------------------------------------------------------------------
def common_cfg(bos, eos):
    return dict(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=INTER,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_POS,
        rms_norm_eps=EPS,
        initializer_range=INIT_STD,
        hidden_act="silu",
        bos_token_id=bos,
        eos_token_id=eos,
        pad_token_id=None,
    )


LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 10000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}


def init_weights(model, seed, bias_std=0.0):
    """Deterministic explicit init: every matrix N(0, INIT_STD),
    RMSNorm weights 1 + 0.1 N(0,1), biases N(0, bias_std)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(bias_std * torch.randn(p.shape, generator=g))
            else:
                p.copy_(INIT_STD * torch.randn(p.shape, generator=g))


# ----------------------------------------------------------------------------
# float64 precision patch for transformers (precision only, same math)
# ----------------------------------------------------------------------------
# transformers 5.23 computes RMSNorm, RoPE cos/sin (and inv_freq) and the eager softmax in
# float32 even when the model is float64.  For float64 references we swap in copies of those
# three functions that keep the input dtype.  Nothing else changes.
def _rms_forward64(self, hidden_states):
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
    return self.weight * hidden_states


def _gemma_rms_forward64(self, x):
    # Gemma2RMSNorm in float64: x rsqrt(mean x^2 + eps) (1 + w)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight)


@torch.no_grad()
def _rope_forward64_typed(self, x, position_ids, layer_type):
    # Gemma 3's rotary embedding: one inv_freq and attention scaling per layer type
    inv = getattr(self, f"{layer_type}_inv_freq").to(device=x.device, dtype=TORCH64)
    freqs = position_ids[..., None].to(TORCH64) * inv
    emb = torch.cat((freqs, freqs), dim=-1)
    scaling = getattr(self, f"{layer_type}_attention_scaling")
    return (emb.cos() * scaling).to(dtype=x.dtype), (emb.sin() * scaling).to(dtype=x.dtype)


@torch.no_grad()
def _rope_forward64_half(self, x, position_ids):
    # GPT-OSS's rotary embedding: cos/sin of head_dim / 2, applied to the two halves
    freqs = position_ids[..., None].to(TORCH64) * self.inv_freq.to(device=x.device, dtype=TORCH64)
    return (freqs.cos() * self.attention_scaling).to(dtype=x.dtype), (freqs.sin() * self.attention_scaling).to(dtype=x.dtype)


@torch.no_grad()
def _rope_forward64(self, x, position_ids):
    freqs = position_ids[..., None].to(TORCH64) * self.inv_freq.to(device=x.device, dtype=TORCH64)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos() * self.attention_scaling
    sin = emb.sin() * self.attention_scaling
    return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def _make_eager64(mod, logit_transform=None):
    """logit_transform(scores [B,H,T,T], layer_idx) -> logits: a variant's transform of the
    scaled logits, applied before the causal mask (None: plain softmax attention)."""

    def eager64(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        key_states = mod.repeat_kv(key, module.num_key_value_groups)
        value_states = mod.repeat_kv(value, module.num_key_value_groups)
        attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
        if logit_transform is not None:
            attn_weights = logit_transform(attn_weights, module.layer_idx)
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=query.dtype)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous()
        return attn_output, attn_weights

    return eager64


@contextlib.contextmanager
def float64_transformers(logit_transform=None):
    saved = []
    for mod, norm_cls, rope_cls in (
        (modeling_llama, modeling_llama.LlamaRMSNorm, modeling_llama.LlamaRotaryEmbedding),
        (modeling_qwen2, modeling_qwen2.Qwen2RMSNorm, modeling_qwen2.Qwen2RotaryEmbedding),
        (modeling_qwen3, modeling_qwen3.Qwen3RMSNorm, modeling_qwen3.Qwen3RotaryEmbedding),
        (modeling_mistral, modeling_mistral.MistralRMSNorm, modeling_mistral.MistralRotaryEmbedding),
    ):
        saved.append((mod, "eager_attention_forward", mod.eager_attention_forward))
        saved.append((norm_cls, "forward", norm_cls.forward))
        saved.append((rope_cls, "forward", rope_cls.forward))
        mod.eager_attention_forward = _make_eager64(mod, logit_transform)
        norm_cls.forward = _rms_forward64
        rope_cls.forward = _rope_forward64
    try:
        yield
    finally:
        for obj, attr, val in saved:
            setattr(obj, attr, val)


def transformers64_reference(model_dir, cls, mod, ids, base_attr, rms_cls=None, rms_forward=None):
    """A model family through transformers itself in float64 (eager, output_attentions):
    RoPE's cos/sin and inv_freq, the eager softmax and (`rms_cls`) RMSNorm patched to keep
    float64 (LayerNorm and GELU already do); the post-RoPE q, k (before any GQA repeat)
    and the scaled causal logits are captured inside the eager attention of module `mod`.
    `base_attr`: the base model's attribute (`gpt_neox`, `model`). Returns logits and
    per-layer caps (pattern, softmax, q, k, attn_scores)."""
    # MoE experts as transformers' plain loop over experts (its grouped kernels need float32)
    moe = "mixtral" in model_dir or "moe" in model_dir or "gpt_oss" in model_dir
    extra = {"experts_implementation": "eager"} if moe else {}
    model = cls.from_pretrained(model_dir, attn_implementation="eager", dtype=torch.float32, **extra)
    model = model.double().eval()
    cfg = model.config
    rotary = getattr(getattr(model, base_attr), "rotary_emb", None)  # None: GPT-2's learned positions
    typed = rotary is not None and hasattr(rotary, "layer_types")  # Gemma 3: RoPE per layer type
    if typed:
        head = cfg.head_dim
        for lt in rotary.layer_types:
            params = cfg.rope_parameters[lt]
            if params.get("rope_type", "default") == "default":
                inv64 = 1.0 / (params["rope_theta"] ** (torch.arange(0, head, 2, dtype=TORCH64) / head))
            else:
                inv32, scaling = ROPE_INIT_FUNCTIONS[params["rope_type"]](cfg, None, layer_type=lt)
                assert scaling == getattr(rotary, f"{lt}_attention_scaling")
                inv64 = inv32.to(TORCH64)
            setattr(rotary, f"{lt}_inv_freq", inv64.clone())
            setattr(rotary, f"{lt}_original_inv_freq", inv64.clone())
    if rotary is not None and not typed:
        head = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        dim = int(head * cfg.rope_parameters.get("partial_rotary_factor", 1.0))
        base = cfg.rope_parameters["rope_theta"]
        rope_type = cfg.rope_parameters.get("rope_type", "default")
        if rope_type == "default":
            inv64 = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=TORCH64) / dim))
        else:
            # transformers' own scaled frequencies (float32, upcast); dynamic NTK as its
            # dynamic_rope_update computes them for a forward pass of T tokens (the float64
            # patch below replaces the decorated forward); YaRN's attention factor stays in
            # rotary.attention_scaling
            init = ROPE_INIT_FUNCTIONS[rope_type]
            seq = {"seq_len": ids.shape[1]} if rope_type in ("dynamic", "longrope") else {}
            inv32, scaling = init(cfg, None, **seq)
            assert scaling == rotary.attention_scaling, (scaling, rotary.attention_scaling)
            inv64 = inv32.to(TORCH64)
        rotary.inv_freq = inv64.clone()
        rotary.original_inv_freq = inv64.clone()
    caps = []

    def eager64(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        if scaling is None:
            scaling = query.size(-1) ** -0.5
        groups = getattr(module, "num_key_value_groups", 1)
        keys = mod.repeat_kv(key, groups) if groups > 1 else key
        values = mod.repeat_kv(value, groups) if groups > 1 else value
        scores, visible = eager_scores(query, keys, attention_mask, scaling, kwargs.get("softcap"))
        masked = scores.masked_fill(~visible, float("-inf"))
        weights = F.softmax(masked, dim=-1)
        cap = {"q": query.detach().clone(), "k": key.detach().clone(), "attn_scores": masked.detach().clone(), "softmax": weights.detach().clone()}
        sinks = getattr(module, "sinks", None)
        if sinks is not None:  # GPT-OSS, as its eager attention: a sink column, softmax, dropped
            col = sinks.reshape(1, -1, 1, 1).expand(masked.shape[0], -1, masked.shape[2], 1)
            comb = torch.cat([masked, col], dim=-1)
            weights = F.softmax(comb - comb.max(-1, keepdim=True).values, dim=-1)[..., :-1]
            cap["sink_mass"] = 1.0 - weights.sum(-1)
        if not torch.equal(visible, torch.ones_like(visible).tril()):  # not plain causal
            cap["visible"] = visible.to(TORCH64)
        caps.append(cap)
        out = torch.matmul(weights, values).transpose(1, 2).contiguous()
        return out, weights

    saved = [(mod, "eager_attention_forward", mod.eager_attention_forward)]
    mod.eager_attention_forward = eager64
    if rotary is not None:
        rope_cls = type(rotary)
        saved.append((rope_cls, "forward", rope_cls.forward))
        half = rope_cls.__name__ == "GptOssRotaryEmbedding"
        rope_cls.forward = _rope_forward64_typed if typed else (_rope_forward64_half if half else _rope_forward64)
    if rms_cls is not None:
        saved.append((rms_cls, "forward", rms_cls.forward))
        rms_cls.forward = rms_forward or _rms_forward64
    try:
        with torch.no_grad():
            out = model(input_ids=ids, output_attentions=True, use_cache=False)
    finally:
        for obj, attr, val in saved:
            setattr(obj, attr, val)
    assert len(caps) == cfg.num_hidden_layers, len(caps)
    for c, a in zip(caps, out.attentions):
        c["pattern"] = a.detach()
        assert a.dtype == TORCH64
    # the same model unpatched (float32 internals) agrees to float32 precision
    with torch.no_grad():
        lg32 = cls.from_pretrained(model_dir, attn_implementation="eager", dtype=torch.float32, **extra).double().eval()(
            input_ids=ids, use_cache=False
        ).logits
    d32 = (lg32 - out.logits).abs().max().item()
    assert d32 < 1e-4, d32
    return out.logits.detach(), caps, d32


def hf_forward(model_dir, cls, ids, inv_freq64, precise, logit_transform=None):
    """Run transformers itself (eager, output_attentions) in float64; `logit_transform`
    patches a variant's logit rule into its eager attention (precise only)."""
    model = cls.from_pretrained(model_dir, attn_implementation="eager", dtype=torch.float32)
    model = model.double().eval()
    if precise:
        # replace the float32-computed inv_freq by the float64 one (same formula; checked below)
        model.model.rotary_emb.inv_freq = inv_freq64.clone()
        model.model.rotary_emb.original_inv_freq = inv_freq64.clone()
    ctx = float64_transformers(logit_transform) if precise else contextlib.nullcontext()
    with ctx, torch.no_grad():
        out = model(input_ids=ids, output_attentions=True, use_cache=False)
    return model, out.logits.detach(), [a.detach() for a in out.attentions]


def eager_scores(query, keys, attention_mask, scaling, softcap):
    """transformers' eager attention logits q k^T * scaling (Gemma 2's cap applied before
    the mask, as its eager attention does), in the inputs' dtype, and the keys
    transformers' own mask lets each query see (a sliding window where the layer has one;
    an additive float mask, 0 visible, or a boolean one), checked to be causal."""
    scores = torch.matmul(query, keys.transpose(2, 3)) * scaling
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    t = scores.shape[-1]
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    if attention_mask is None:
        visible = causal
    else:
        m = attention_mask[0, 0, :, :t]
        visible = m if m.dtype == torch.bool else (m == 0)
    assert not (visible & ~causal).any(), "a key after its query is visible"
    return scores, visible


def mxfp4_quantize(w):
    """w [E, out, in] to MXFP4 as GPT-OSS checkpoints store it: per group of 32 inputs a
    power-of-two scale 2^e with e = ceil(log2(max |x| / 6)) (byte e + 127), each value the
    nearest FP4 (E2M1) value of x / 2^e, two nibbles a byte, low first. Returns blocks
    [E, out, in / 32, 16] and scales [E, out, in / 32], uint8."""
    E, O, I = w.shape
    lut = torch.tensor(FP4_VALUES, dtype=TORCH64)
    g = w.to(TORCH64).reshape(E, O, I // 32, 32)
    e = torch.ceil(torch.log2(g.abs().amax(-1).clamp(min=1e-30) / 6.0)).clamp(-127, 127)
    nib = ((g / torch.pow(2.0, e)[..., None])[..., None] - lut).abs().argmin(-1).to(torch.uint8)
    return (nib[..., 0::2] | (nib[..., 1::2] << 4)).contiguous(), (e + 127).to(torch.uint8).contiguous()


# ----------------------------------------------------------------------------
# Independent float64 implementation (from the safetensors files and config.json)
# ----------------------------------------------------------------------------
def load_state(model_dir):
    idx = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    sd = {}
    for fn in files:
        with safe_open(os.path.join(model_dir, fn), framework="pt") as f:
            for k in f.keys():
                t = f.get_tensor(k)
                assert t.dtype == torch.float32, (k, t.dtype)
                sd[k] = t.to(TORCH64)
    return sd


def rope_inv_freq(cfg):
    """float64 inverse frequencies, written from the RoPE / Llama 3.1 definitions."""
    rp = cfg.get("rope_parameters") or {}
    if not rp:  # old style
        rp = dict(cfg.get("rope_scaling") or {})
        rp.setdefault("rope_type", rp.pop("type", "default"))
        rp["rope_theta"] = cfg.get("rope_theta", 10000.0)
    d = cfg["head_dim"]
    theta = float(rp["rope_theta"])
    k = np.arange(0, d, 2, dtype=np.float64)
    inv = 1.0 / theta ** (k / d)
    branches = []
    if rp["rope_type"] == "p_rope":
        # SPEC section 2: n = floor(p d/2) pairs rotate, the other d/2 - n have frequency 0;
        # spacing rope keeps theta^(-2k/d), spacing log uses theta^(-k/(n-1)) (1 when n = 1).
        p = float(rp["p"])
        n = math.floor(p * (d // 2) + 1e-9)
        assert 0 < p <= 1 and n >= 1, (p, n)
        spacing = rp.get("spacing", "rope")
        out = []
        for kk in range(d // 2):
            if kk >= n:
                out.append(0.0)
            elif spacing == "rope":
                out.append(1.0 / theta ** (2 * kk / d))
            elif spacing == "log":
                out.append(1.0 if n == 1 else 1.0 / theta ** (kk / (n - 1)))
            else:
                raise ValueError(spacing)
        return torch.tensor(out, dtype=TORCH64), ["rotate"] * n + ["zero"] * (d // 2 - n)
    if rp["rope_type"] == "llama3":
        factor = rp["factor"]
        lo, hi = rp["low_freq_factor"], rp["high_freq_factor"]
        old = rp["original_max_position_embeddings"]
        lo_wl, hi_wl = old / lo, old / hi
        out = []
        for f in inv:
            wl = 2 * math.pi / f
            if wl < hi_wl:
                out.append(f)
                branches.append("keep")
            elif wl > lo_wl:
                out.append(f / factor)
                branches.append("divide")
            else:
                s = (old / wl - lo) / (hi - lo)
                out.append((1 - s) * f / factor + s * f)
                branches.append("smooth")
        inv = np.array(out)
    else:
        assert rp["rope_type"] == "default", rp
    return torch.tensor(inv, dtype=TORCH64), branches


def rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope(x, cos, sin):
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def phi(z, activation):
    if activation == "linear_clipping":
        return torch.clamp(0.1 * z + 0.5, 0.0, 1.0)
    if activation == "sigmoid":
        return torch.sigmoid(z)
    raise ValueError(activation)


def scale_invariant_coeffs(t, tau):
    """a_t = sqrt(1 + 2 ln(1 + t/tau)), m_t = -2 ln(1 + t/tau) (t >= 0, float64 tensors)."""
    lg = torch.log1p(t / tau)
    return torch.sqrt(1.0 + 2.0 * lg), -2.0 * lg


def logn_scales(sd, cfg, layer, H):
    """s_h [H] of a logn layer: the stored logn_scale, else config.json's logn.scale."""
    key = f"model.layers.{layer}.self_attn.logn_scale"
    if key in sd:
        return sd[key]
    return torch.full((H,), float(cfg["logn"]["scale"]), dtype=TORCH64)


def own_forward(sd, cfg, ids, variant, *, affine=None, gate_logit_override=None):
    """Returns logits [B,T,V] and per-layer captures. variant in
    softmax|off_by_one|sink|gated|affine_scaled|affine_scaled_gated|scale_invariant|logn.
    QK-norm (per-head RMSNorm of q and k before RoPE) when the weights have q_norm."""
    Bn, Tn = ids.shape
    H, KV, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    rep = H // KV
    eps = cfg["rms_norm_eps"]
    inv_freq, _ = rope_inv_freq(cfg)
    pos = torch.arange(Tn, dtype=TORCH64)
    ang = pos[:, None] * inv_freq[None, :]  # [T, D/2]
    cos, sin = ang.cos(), ang.sin()  # broadcast over [B, H, T, D/2]
    causal = torch.tril(torch.ones(Tn, Tn, dtype=torch.bool))
    gated = variant in ("gated", "affine_scaled_gated")
    is_affine = variant in ("affine_scaled", "affine_scaled_gated")

    def lin(x, name):
        y = x @ sd[name + ".weight"].T
        if name + ".bias" in sd:
            y = y + sd[name + ".bias"]
        return y

    h = sd["model.embed_tokens.weight"][ids]
    caps = []
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        c = {}
        x = rms(h, sd[p + "input_layernorm.weight"], eps)
        qfull = lin(x, p + "self_attn.q_proj")
        if gated:
            qg = qfull.view(Bn, Tn, H, 2 * D)
            q, g = qg[..., :D], qg[..., D:]  # == torch.chunk(..., 2, dim=-1)
            g = g.reshape(Bn, Tn, H * D)
            if gate_logit_override is not None:
                g = torch.full_like(g, gate_logit_override)
            gate = torch.sigmoid(g)
            c["gate"] = gate
        else:
            assert qfull.shape[-1] == H * D
            q = qfull.view(Bn, Tn, H, D)
        k = lin(x, p + "self_attn.k_proj").view(Bn, Tn, KV, D)
        v = lin(x, p + "self_attn.v_proj").view(Bn, Tn, KV, D)
        if p + "self_attn.q_norm.weight" in sd:  # QK-norm over each head's D dims
            q = rms(q, sd[p + "self_attn.q_norm.weight"], eps)
            k = rms(k, sd[p + "self_attn.k_norm.weight"], eps)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, heads, T, D]
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        c["q"], c["k"] = q, k
        kr = k.repeat_interleave(rep, dim=1)  # query head h uses kv head h // rep
        vr = v.repeat_interleave(rep, dim=1)
        s = (q @ kr.transpose(-1, -2)) / math.sqrt(D)
        if variant == "scale_invariant":
            t = (pos[:, None] - pos[None, :]).clamp(min=0.0)  # [T, T], i - j
            a_t, m_t = scale_invariant_coeffs(t, float(cfg["scale_invariant"]["tau"]))
            s = a_t * s + m_t
        elif variant == "logn":
            s_h = logn_scales(sd, cfg, l, H).view(1, H, 1, 1)
            s = s * s_h * torch.log(pos + 1.0).view(1, 1, Tn, 1)
        s = s.masked_fill(~causal, float("-inf"))
        c["attn_scores"] = s
        m = s.max(-1, keepdim=True).values
        e = torch.exp(s - m)
        pm = e / e.sum(-1, keepdim=True)  # plain softmax over visible keys
        if variant in ("softmax", "gated", "scale_invariant", "logn"):
            a = pm
        elif variant == "off_by_one":
            # exp(s)/(sum exp(s) + 1), stably: shift by m' = max(row max, 0)
            m0 = torch.clamp(m, min=0.0)
            e0 = torch.exp(s - m0)
            a = e0 / (e0.sum(-1, keepdim=True) + torch.exp(-m0))
            c["sink_mass"] = 1.0 - a.sum(-1)
        elif variant == "sink":
            # GPT-OSS: sink logit as an extra column, subtract row max, softmax, drop the column
            S = sd[p + "self_attn.sinks"].view(1, H, 1, 1).expand(Bn, H, Tn, 1)
            comb = torch.cat([s, S], dim=-1)
            comb = comb - comb.max(-1, keepdim=True).values
            pr = F.softmax(comb, dim=-1)
            a = pr[..., :-1]
            c["sink_mass"] = 1.0 - a.sum(-1)
        elif is_affine:
            z = lin(x, p + "self_attn.alpha_proj")  # [B, T, H]
            alpha = phi(z, affine["activation"]).transpose(1, 2)  # [B, H, T]
            ama = sd[p + "self_attn.alpha_ma"].view(1, H, 1)
            if affine["beta_length"] == "full":
                N = torch.full((Tn,), float(Tn), dtype=TORCH64)
            else:
                N = pos + 1.0
            beta = (ama - alpha) / N.view(1, 1, Tn)
            a = alpha[..., None] * pm + beta[..., None]
            a = a.masked_fill(~causal, 0.0)
            c["alpha"] = alpha
            c["alpha_pre"] = z
        else:
            raise ValueError(variant)
        c["pattern"] = a
        c["softmax"] = pm
        o = (a @ vr).transpose(1, 2).reshape(Bn, Tn, H * D)
        if gated:
            o = o * gate
        h = h + lin(o, p + "self_attn.o_proj")
        x2 = rms(h, sd[p + "post_attention_layernorm.weight"], eps)
        mlp = lin(F.silu(lin(x2, p + "mlp.gate_proj")) * lin(x2, p + "mlp.up_proj"), p + "mlp.down_proj")
        h = h + mlp
        caps.append(c)
    h = rms(h, sd["model.norm.weight"], eps)
    head = sd["lm_head.weight"] if "lm_head.weight" in sd else sd["model.embed_tokens.weight"]
    logits = h @ head.T
    return logits, caps


# ----------------------------------------------------------------------------
# Metrics (numpy float64, from the reference tensors)
# ----------------------------------------------------------------------------
def fl(x):
    x = float(x)
    return None if math.isnan(x) else x


def fl_list(a):
    a = np.asarray(a, dtype=np.float64)
    if a.ndim == 0:
        return fl(a)
    return [fl_list(v) for v in a]


QS = [0.05, 0.25, 0.5, 0.75, 0.95]
QNAMES = ["p05", "p25", "p50", "p75", "p95"]


def row_entropy(a):
    """a [B,H,T,T] (zeros above diagonal). Returns H [B,H,T] with NaN where no positive mass."""
    Tn = a.shape[-1]
    vis = np.tril(np.ones((Tn, Tn), dtype=bool))
    q = np.where(vis, np.maximum(a, 0.0), 0.0)
    tot = q.sum(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        qn = q / tot
        terms = np.where(qn > 0, qn * np.log(np.where(qn > 0, qn, 1.0)), 0.0)
    Hh = -terms.sum(-1)
    Hh[tot[..., 0] <= 0] = np.nan
    return Hh


def compute_metrics(name, variant, ids, logits, layers, alpha_ma):
    L = len(layers)
    Bn, Tn = ids.shape
    H = layers[0]["pattern"].shape[1]
    KV = layers[0]["k"].shape[1]
    rep = H // KV
    mq = MIN_QUERY
    M = {
        "model": name,
        "variant": variant,
        "options": {
            "min_query": MIN_QUERY,
            "heatmap_layer": HEATMAP_LAYER,
            "heatmap_size": HEATMAP_SIZE,
            "profile_query": PROFILE_QUERY,
            "bins": BINS,
            "sink_eps": SINK_EPS,
            "bands": BANDS,
            "num_seqs": Bn,
            "seq_len": Tn,
        },
    }

    def per_layer_mean_std(cells):  # cells [B, H, Tq] for one layer (queries >= mq), may contain NaN
        mean = np.nanmean(cells)
        per_seq = np.array([np.nanmean(cells[b]) for b in range(Bn)])
        return mean, np.std(per_seq)

    causal = np.tril(np.ones((Tn, Tn), dtype=bool))
    for l in range(L):  # vis[i, j]: query i sees key j (transformers' mask; a sliding window)
        layers[l]["vis"] = layers[l]["visible"] != 0 if "visible" in layers[l] else causal

    # first_token: over the queries that see the first token (a window may hide it)
    ft_m, ft_s, ft_share = [], [], []
    for l in range(L):
        a = layers[l]["pattern"]
        sees = layers[l]["vis"][mq:, 0]
        m, s = per_layer_mean_std(a[:, :, mq:, 0][:, :, sees])
        ft_m.append(m)
        ft_s.append(s)
        ft_share.append(sees.mean())
    M["first_token"] = {"mean": fl_list(ft_m), "std": fl_list(ft_s), "visible_share": fl_list(ft_share)}

    # entropy / entropy_softmax
    for l in range(L):  # p = plain softmax of the stored raw scores (-inf above the diagonal)
        sc = layers[l]["attn_scores"]
        e = np.exp(sc - sc.max(-1, keepdims=True))
        layers[l]["softmax_np"] = e / e.sum(-1, keepdims=True)
    for key, src in (("entropy", "pattern"), ("entropy_softmax", "softmax_np")):
        em, es, eh = [], [], []
        nan_count = 0
        for l in range(L):
            Hh = row_entropy(layers[l][src])[:, :, mq:]
            nan_count += int(np.isnan(Hh).sum())
            m, s = per_layer_mean_std(Hh)
            em.append(m)
            es.append(s)
            eh.append([np.nanmean(Hh[:, h]) for h in range(H)])
        M[key] = {"mean": fl_list(em), "std": fl_list(es), "per_head": fl_list(eh), "nan_count": nan_count}

    # weight_sum
    ws = {k: [] for k in ["mean", "std"] + QNAMES}
    pooled_all = []
    for l in range(L):
        a = layers[l]["pattern"]
        W = a.sum(-1).mean(1)[:, mq:]  # [B, Tq]
        vals = W.reshape(-1)
        pooled_all.append(vals)
        ws["mean"].append(vals.mean())
        ws["std"].append(np.std(W.mean(1)))
        for qn, qv in zip(QNAMES, np.quantile(vals, QS)):
            ws[qn].append(qv)
    M["weight_sum"] = {k: fl_list(v) for k, v in ws.items()}
    pooled_all = np.concatenate(pooled_all)
    lo, hi = pooled_all.min(), pooled_all.max()
    # Softmax / gated models: every W_i is 1 up to float64 rounding (spread ~1e-16), which
    # numpy cannot split into 20 finite bins.  Such a pool is "degenerate": it is treated as
    # the constant round(mean, 9) and binned with numpy's rule for a constant array
    # (range [v - 0.5, v + 0.5]).  Compare these bins only when degenerate is false.
    degenerate = bool(hi - lo <= 1e-9 * max(1.0, abs(hi)))
    if degenerate:
        v = round(float(pooled_all.mean()), 9)
        cnt, edges = np.histogram(np.full(pooled_all.shape, v), bins=BINS)
    else:
        cnt, edges = np.histogram(pooled_all, bins=BINS)
    M["weight_sum_hist"] = {
        "bin_lo": fl_list(edges[:-1]),
        "bin_hi": fl_list(edges[1:]),
        "count": [int(c) for c in cnt],
        "min": fl(lo),
        "max": fl(hi),
        "n": int(pooled_all.size),
        "degenerate": degenerate,
    }

    # qk_mean: raw q.k after RoPE, all visible pairs incl. diagonal, all queries
    per_m, per_a, allv = [], [], []
    for l in range(L):
        vis = layers[l]["vis"]
        q = layers[l]["q"]
        k = np.repeat(layers[l]["k"], rep, axis=1)
        qk = np.einsum("bhid,bhjd->bhij", q, k)
        v = qk[:, :, vis]
        allv.append(v.reshape(-1))
        per_m.append(v.mean())
        per_a.append(np.abs(v).mean())
    allv = np.concatenate(allv)
    M["qk_mean"] = {
        "mean": fl(allv.mean()),
        "abs_mean": fl(np.abs(allv).mean()),
        "per_layer_mean": fl_list(per_m),
        "per_layer_abs_mean": fl_list(per_a),
    }

    # head_total
    M["head_total"] = fl_list([[layers[l]["pattern"][:, h, mq:].sum(-1).mean() for h in range(H)] for l in range(L)])

    # heatmap / query_profile (layer HEATMAP_LAYER, 1-based)
    ah = layers[HEATMAP_LAYER - 1]["pattern"]
    S = HEATMAP_SIZE
    M["heatmap"] = {"layer": HEATMAP_LAYER, "values": fl_list(ah[:, :, :S, :S].mean(axis=(0, 1)))}
    prof = ah[:, :, PROFILE_QUERY, :].mean(axis=(0, 1))
    has_sink = variant in ("sink", "off_by_one")
    M["query_profile"] = {
        "layer": HEATMAP_LAYER,
        "query": PROFILE_QUERY,
        "values": fl_list(prof),
        "sink_mass": fl(1.0 - prof.sum()) if has_sink else 0.0,
    }

    if has_sink:
        M["sink_mass"] = fl_list(
            [[(1.0 - layers[l]["pattern"][:, h, mq:].sum(-1)).mean() for h in range(H)] for l in range(L)]
        )

    if "alpha" in layers[0]:
        al = {k: [] for k in ["mean", "std"] + QNAMES + ["alpha_ma"]}
        for l in range(L):
            A = layers[l]["alpha"]  # [B, H, T]
            row = {k: [] for k in al}
            for h in range(H):
                vals = A[:, h, mq:].reshape(-1)
                row["mean"].append(vals.mean())
                row["std"].append(np.std(vals))
                for qn, qv in zip(QNAMES, np.quantile(vals, QS)):
                    row[qn].append(qv)
                row["alpha_ma"].append(alpha_ma[l][h])
            for k in al:
                al[k].append(row[k])
        M["alpha"] = {k: fl_list(v) for k, v in al.items()}

    if "gate" in layers[0]:
        D = layers[0]["q"].shape[-1]
        M["gate"] = fl_list(
            [[layers[l]["gate"][:, mq:, h * D:(h + 1) * D].mean() for h in range(H)] for l in range(L)]
        )

    # nll
    lg = logits - logits.max(-1, keepdims=True)
    logp = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
    nll = np.zeros((Bn, Tn - 1))
    for b in range(Bn):
        for p in range(1, Tn):
            nll[b, p - 1] = -logp[b, p - 1, ids[b, p]]
    M["nll"] = {"mean": fl(nll.mean()), "ppl": fl(math.exp(nll.mean())), "per_position": fl_list(nll.mean(0))}

    # sink_rate
    imp = np.array(
        [[layers[l]["pattern"][:, h, layers[l]["vis"][:, 0], 0].mean() for h in range(H)] for l in range(L)]
    )
    M["sink_rate"] = {"importance": fl_list(imp), "rate": fl((imp > SINK_EPS).sum() / imp.size)}

    # distance_profile
    ii = np.arange(Tn)[:, None]
    jj = np.arange(Tn)[None, :]
    t = ii - jj
    masks = {
        "first": (jj == 0) & (ii >= 1),
        "0": t == 0,
        "1-10": (t >= 1) & (t < 10) & (jj != 0),
        "10-100": (t >= 10) & (t < 100) & (jj != 0),
    }
    per_layer, per_head = [], []
    for l in range(L):
        a = layers[l]["pattern"]
        bands = np.stack([(a * masks[bn]).sum(-1) for bn in BANDS], axis=-1)[:, :, mq:]  # [B,H,Tq,4]
        wsum = a.sum(-1)[:, :, mq:]
        err = np.abs(bands.sum(-1) - wsum).max()
        assert err < 1e-12, ("distance bands do not sum to weight sum", name, l, err)
        per_head.append(bands.mean(axis=(0, 2)))
        per_layer.append(bands.mean(axis=(0, 1, 2)))
    M["distance_profile"] = {"bands": BANDS, "per_layer": fl_list(per_layer), "per_head": fl_list(per_head)}
    return M, imp


# ----------------------------------------------------------------------------
# Writers
# ----------------------------------------------------------------------------
def write_json(path, obj, indent=2):
    with open(path, "w") as f:
        json.dump(obj, f, indent=indent, allow_nan=False)
        f.write("\n")


def write_reference(name, variant, ids, logits, caps, alpha_ma=None, logit_fn=None):
    """logit_fn(layer, head, i, j, s) -> the logit the variant normalises, for the
    cross-check (None: s unchanged)."""
    tens = {"input_ids": ids.to(torch.int64).contiguous(), "logits": logits.to(TORCH64).contiguous()}
    layers_np = []
    for l, c in enumerate(caps):
        for key in ("pattern", "q", "k", "attn_scores", "sink_mass", "alpha", "gate", "visible"):
            if key in c:
                tens[f"layers.{l}.{key}"] = c[key].to(TORCH64).contiguous()
        layers_np.append({k: v.numpy() for k, v in c.items()})
    save_file(tens, os.path.join(REFS, f"{name}.safetensors"), metadata={"format": "pt"})
    M, imp = compute_metrics(name, variant, ids.numpy(), logits.numpy(), layers_np, alpha_ma)
    write_json(os.path.join(REFS, f"{name}.metrics.json"), M)
    worst = crosscheck_metrics(name, variant, alpha_ma, logit_fn)
    print(f"{name}: metrics re-derived with Python loops from the written files, max diff {worst[0]:.3e} ({worst[1]})")
    # threshold safety for sink_rate counting
    margin = np.abs(imp - SINK_EPS).min()
    return M, margin


def crosscheck_metrics(name, variant, alpha_ma, logit_fn=None):
    """Re-read the written files and recompute the metrics with plain Python loops."""
    if logit_fn is None:
        logit_fn = lambda l, h, i, j, s: s  # noqa: E731
    with safe_open(os.path.join(REFS, f"{name}.safetensors"), framework="np") as f:
        R = {k: f.get_tensor(k) for k in f.keys()}
    with open(os.path.join(REFS, f"{name}.metrics.json")) as f:
        M = json.load(f)
    ids = R["input_ids"].tolist()
    Bn, Tn = len(ids), len(ids[0])
    L = sum(1 for k in R if k.endswith(".pattern"))
    H, KV, D = R["layers.0.q"].shape[1], R["layers.0.k"].shape[1], R["layers.0.q"].shape[3]
    mq = MIN_QUERY
    worst = [0.0, ""]

    def close(x, y, what):
        if x is None or y is None:
            assert x is None and y is None, what
            return
        d = abs(x - y)
        assert d <= 1e-12 + 1e-12 * abs(y), (name, what, x, y)
        if d > worst[0]:
            worst[:] = [d, what]

    def mean(v):
        return math.fsum(v) / len(v)

    def pstd(v):
        m = mean(v)
        return math.sqrt(math.fsum((x - m) ** 2 for x in v) / len(v))

    def quant(v, q):
        v = sorted(v)
        pos = q * (len(v) - 1)
        lo = int(math.floor(pos))
        hi = min(lo + 1, len(v) - 1)
        return v[lo] + (v[hi] - v[lo]) * (pos - lo)

    def entropy(row):
        qv = [max(x, 0.0) for x in row]
        tot = math.fsum(qv)
        if tot <= 0:
            return None
        return -math.fsum((x / tot) * math.log(x / tot) for x in qv if x > 0)

    def visible_of(l):
        key = f"layers.{l}.visible"
        if key in R:
            return [[x != 0 for x in row] for row in R[key].tolist()]
        return [[j <= i for j in range(Tn)] for i in range(Tn)]

    for l in range(L):
        A = R[f"layers.{l}.pattern"].tolist()
        S = R[f"layers.{l}.attn_scores"].tolist()
        V = visible_of(l)
        for b in range(Bn):
            for h in range(H):
                for i in range(Tn):
                    for j in range(Tn):
                        if not V[i][j]:
                            assert A[b][h][i][j] == 0.0 and S[b][h][i][j] == float("-inf")
        ft = [[A[b][h][i][0] for h in range(H) for i in range(mq, Tn) if V[i][0]] for b in range(Bn)]
        close(mean(sum(ft, [])), M["first_token"]["mean"][l], f"first_token.mean[{l}]")
        close(pstd([mean(v) for v in ft]), M["first_token"]["std"][l], f"first_token.std[{l}]")
        close(mean([float(V[i][0]) for i in range(mq, Tn)]), M["first_token"]["visible_share"][l],
              f"first_token.visible_share[{l}]")
        # entropy of a, and of p recomputed from the scores
        P = [[[[0.0] * Tn for _ in range(Tn)] for _ in range(H)] for _ in range(Bn)]
        for b in range(Bn):
            for h in range(H):
                for i in range(Tn):
                    m = max(S[b][h][i][j] for j in range(i + 1) if V[i][j])
                    e = [math.exp(S[b][h][i][j] - m) if V[i][j] else 0.0 for j in range(i + 1)]
                    z = math.fsum(e)
                    for j in range(i + 1):
                        P[b][h][i][j] = e[j] / z
        for key, src in (("entropy", A), ("entropy_softmax", P)):
            ent = [[entropy(src[b][h][i][: i + 1]) for h in range(H) for i in range(mq, Tn)] for b in range(Bn)]
            allv = [x for v in ent for x in v if x is not None]
            close(mean(allv), M[key]["mean"][l], f"{key}.mean[{l}]")
            close(pstd([mean([x for x in v if x is not None]) for v in ent]), M[key]["std"][l], f"{key}.std[{l}]")
            for h in range(H):
                vh = [entropy(src[b][h][i][: i + 1]) for b in range(Bn) for i in range(mq, Tn)]
                close(mean([x for x in vh if x is not None]), M[key]["per_head"][l][h], f"{key}.per_head[{l}][{h}]")
        W = [[mean([math.fsum(A[b][h][i]) for h in range(H)]) for i in range(mq, Tn)] for b in range(Bn)]
        Wall = sum(W, [])
        close(mean(Wall), M["weight_sum"]["mean"][l], f"weight_sum.mean[{l}]")
        close(pstd([mean(v) for v in W]), M["weight_sum"]["std"][l], f"weight_sum.std[{l}]")
        for qn, qv in zip(QNAMES, QS):
            close(quant(Wall, qv), M["weight_sum"][qn][l], f"weight_sum.{qn}[{l}]")
        Q = R[f"layers.{l}.q"].tolist()
        K = R[f"layers.{l}.k"].tolist()
        qk = []
        for b in range(Bn):
            for h in range(H):
                kh = h // (H // KV)
                for i in range(Tn):
                    for j in (j for j in range(i + 1) if V[i][j]):
                        dot = math.fsum(Q[b][h][i][d] * K[b][kh][j][d] for d in range(D))
                        qk.append(dot)
                        want = logit_fn(l, h, i, j, dot / math.sqrt(D))
                        assert abs(want - S[b][h][i][j]) < 1e-12 * max(1.0, abs(dot)), (name, l, b, h, i, j)
        close(mean(qk), M["qk_mean"]["per_layer_mean"][l], f"qk_mean.per_layer_mean[{l}]")
        close(mean([abs(x) for x in qk]), M["qk_mean"]["per_layer_abs_mean"][l], f"qk_mean.per_layer_abs_mean[{l}]")
        for h in range(H):
            close(mean([math.fsum(A[b][h][i]) for b in range(Bn) for i in range(mq, Tn)]),
                  M["head_total"][l][h], f"head_total[{l}][{h}]")
            close(mean([A[b][h][i][0] for b in range(Bn) for i in range(Tn) if V[i][0]]),
                  M["sink_rate"]["importance"][l][h], f"sink_rate.importance[{l}][{h}]")
            if "sink_mass" in M:
                close(mean([1.0 - math.fsum(A[b][h][i]) for b in range(Bn) for i in range(mq, Tn)]),
                      M["sink_mass"][l][h], f"sink_mass[{l}][{h}]")
            if "gate" in M:
                G = R[f"layers.{l}.gate"].tolist()
                close(mean([G[b][i][h * D + d] for b in range(Bn) for i in range(mq, Tn) for d in range(D)]),
                      M["gate"][l][h], f"gate[{l}][{h}]")
            if "alpha" in M:
                AL = R[f"layers.{l}.alpha"].tolist()
                v = [AL[b][h][i] for b in range(Bn) for i in range(mq, Tn)]
                close(mean(v), M["alpha"]["mean"][l][h], f"alpha.mean[{l}][{h}]")
                close(pstd(v), M["alpha"]["std"][l][h], f"alpha.std[{l}][{h}]")
                for qn, qv in zip(QNAMES, QS):
                    close(quant(v, qv), M["alpha"][qn][l][h], f"alpha.{qn}[{l}][{h}]")
                close(alpha_ma[l][h], M["alpha"]["alpha_ma"][l][h], "alpha_ma")
            bands = {bn: [] for bn in BANDS}
            for b in range(Bn):
                for i in range(mq, Tn):
                    row = A[b][h][i]
                    bands["first"].append(row[0])
                    bands["0"].append(row[i])
                    bands["1-10"].append(math.fsum(row[j] for j in range(1, i + 1) if 1 <= i - j < 10))
                    bands["10-100"].append(math.fsum(row[j] for j in range(1, i + 1) if 10 <= i - j < 100))
            for k_, bn in enumerate(BANDS):
                close(mean(bands[bn]), M["distance_profile"]["per_head"][l][h][k_], f"distance[{l}][{h}][{bn}]")
        if l == HEATMAP_LAYER - 1:
            for i in range(HEATMAP_SIZE):
                for j in range(HEATMAP_SIZE):
                    close(mean([A[b][h][i][j] for b in range(Bn) for h in range(H)]),
                          M["heatmap"]["values"][i][j], f"heatmap[{i}][{j}]")
            prof = [mean([A[b][h][PROFILE_QUERY][j] for b in range(Bn) for h in range(H)]) for j in range(Tn)]
            for j in range(Tn):
                close(prof[j], M["query_profile"]["values"][j], f"query_profile[{j}]")
    # pooled qk_mean and the weight-sum histogram
    allqk, allW = [], []
    for l in range(L):
        A = R[f"layers.{l}.pattern"].tolist()
        Q, K = R[f"layers.{l}.q"].tolist(), R[f"layers.{l}.k"].tolist()
        V = visible_of(l)
        for b in range(Bn):
            for h in range(H):
                for i in range(Tn):
                    for j in (j for j in range(i + 1) if V[i][j]):
                        allqk.append(math.fsum(Q[b][h][i][d] * K[b][h // (H // KV)][j][d] for d in range(D)))
            for i in range(mq, Tn):
                allW.append(mean([math.fsum(A[b][h][i]) for h in range(H)]))
    close(mean(allqk), M["qk_mean"]["mean"], "qk_mean.mean")
    close(mean([abs(x) for x in allqk]), M["qk_mean"]["abs_mean"], "qk_mean.abs_mean")
    hist = M["weight_sum_hist"]
    assert sum(hist["count"]) == len(allW) == hist["n"]
    if not hist["degenerate"]:
        lo, hi = min(allW), max(allW)
        close(lo, hist["bin_lo"][0], "hist.lo")
        close(hi, hist["bin_hi"][-1], "hist.hi")
        cnt = [0] * BINS
        for w in allW:
            k_ = BINS - 1 if w == hi else int((w - lo) / (hi - lo) * BINS)
            # numpy corrects for edge rounding: re-check against the written edges
            while k_ > 0 and w < hist["bin_lo"][k_]:
                k_ -= 1
            while k_ < BINS - 1 and w >= hist["bin_hi"][k_]:
                k_ += 1
            cnt[k_] += 1
        assert cnt == hist["count"], (name, cnt, hist["count"])
    LG = R["logits"].tolist()
    nll = [[0.0] * (Tn - 1) for _ in range(Bn)]
    for b in range(Bn):
        for p in range(1, Tn):
            row = LG[b][p - 1]
            m = max(row)
            lse = m + math.log(math.fsum(math.exp(x - m) for x in row))
            nll[b][p - 1] = lse - row[ids[b][p]]
    close(mean(sum(nll, [])), M["nll"]["mean"], "nll.mean")
    for p in range(Tn - 1):
        close(mean([nll[b][p] for b in range(Bn)]), M["nll"]["per_position"][p], f"nll.per_position[{p}]")
    return worst


def peak_stats(caps):
    """share of rows with query i >= 3 whose max softmax weight p_ij > 0.3 (uniform would be
    <= 0.25).  Uses p, not a: affine_scaled shrinks a by alpha on purpose."""
    tot, peaked = 0, 0
    for c in caps:
        a = c["softmax"][:, :, 3:, :]
        mx = a.max(-1).values
        tot += mx.numel()
        peaked += int((mx > 0.3).sum())
    return peaked / tot


def fmt(x):
    return f"{x:.3e}"


# ----------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------
def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for d in (MODELS, REFS, CORPUS):
        if os.path.isdir(d):
            shutil.rmtree(d)
        os.makedirs(d)

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, numpy {np.__version__}")
    tok, bos, eos = build_tokenizer()
    print(f"tokenizer: vocab {tok.get_vocab_size()}, <unk>=0 <s>={bos} </s>={eos}")
    tok_json = os.path.join(FIX, "tokenizer.tmp.json")
    tok.save(tok_json)

    g = torch.Generator().manual_seed(SEED_IDS)
    ids = torch.randint(0, VOCAB, (B, T), generator=g, dtype=torch.int64)

    summary = []
    checks = []

    # ---------------------------------------------------------------- llama_gqa
    def finish_dir(d):
        shutil.copy(tok_json, os.path.join(d, "tokenizer.json"))

    name = "llama_gqa"
    cfg = LlamaConfig(**common_cfg(bos, eos), rope_parameters=dict(LLAMA3_ROPE), tie_word_embeddings=False)
    torch.manual_seed(1)
    model = LlamaForCausalLM(cfg)
    init_weights(model, seed=101)
    d = os.path.join(MODELS, name)
    model.save_pretrained(d, max_shard_size="40KB")
    finish_dir(d)
    shards = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    assert len(shards) >= 2 and os.path.exists(os.path.join(d, "model.safetensors.index.json")), shards
    print(f"{name}: shards {shards}")

    def plain_fixture(name, cls, d):
        with open(os.path.join(d, "config.json")) as f:
            jcfg = json.load(f)
        inv64, branches = rope_inv_freq(jcfg)
        sd = load_state(d)
        own_logits, caps = own_forward(sd, jcfg, ids, "softmax")
        # transformers unpatched (float32 internals) - informational
        hf_model, lg32, at32 = hf_forward(d, cls, ids, inv64, precise=False)
        inv_hf = hf_model.model.rotary_emb.inv_freq.to(TORCH64)
        inv_rel = ((inv_hf - inv64).abs() / inv64).max().item()
        assert inv_rel < 1e-6, inv_rel
        du_l = (lg32 - own_logits).abs().max().item()
        du_a = max((a - c["pattern"]).abs().max().item() for a, c in zip(at32, caps))
        # transformers with float64 internals: must agree to 1e-12
        _, lg64, at64 = hf_forward(d, cls, ids, inv64, precise=True)
        dl = (lg64 - own_logits).abs().max().item()
        da = max((a - c["pattern"]).abs().max().item() for a, c in zip(at64, caps))
        assert dl < 1e-12 and da < 1e-12, (name, dl, da)
        checks.append(
            f"{name}: own float64 path vs transformers eager (float64-precision patch): "
            f"logits {fmt(dl)}, attentions {fmt(da)} (assert < 1e-12); vs unpatched transformers "
            f"(float32 RMSNorm/RoPE/softmax internals): logits {fmt(du_l)}, attentions {fmt(du_a)}; "
            f"inv_freq f32 vs f64 rel {fmt(inv_rel)}"
        )
        # stored: logits and pattern from transformers (patched); q/k/scores from own path
        for c, a in zip(caps, at64):
            c["pattern"] = a
        return jcfg, sd, caps, lg64, branches, inv64

    jcfg, sd_llama, caps, logits, branches, inv64 = plain_fixture(name, LlamaForCausalLM, d)
    assert sorted(branches) == ["divide", "divide", "keep", "smooth"], branches
    print(f"{name}: llama3 inv_freq {inv64.tolist()} branches {branches}")
    M, margin = write_reference(name, "softmax", ids, logits, caps)
    summary.append((name, peak_stats(caps), margin, M))

    # ---------------------------------------------------------------- qwen2
    name = "qwen2"
    qcfg = Qwen2Config(
        **common_cfg(bos, eos),
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        tie_word_embeddings=True,
        use_sliding_window=False,
        max_window_layers=LAYERS,
    )
    torch.manual_seed(2)
    model = Qwen2ForCausalLM(qcfg)
    init_weights(model, seed=202, bias_std=0.5)
    d = os.path.join(MODELS, name)
    model.save_pretrained(d)
    finish_dir(d)
    sd_chk = load_state(d)
    assert "lm_head.weight" not in sd_chk, "tied lm_head should not be saved"
    for l in range(LAYERS):
        for pr in ("q_proj", "k_proj", "v_proj"):
            assert sd_chk[f"model.layers.{l}.self_attn.{pr}.bias"].abs().min() > 0
    _, _, caps, logits, _, _ = plain_fixture(name, Qwen2ForCausalLM, d)
    M, margin = write_reference(name, "softmax", ids, logits, caps)
    summary.append((name, peak_stats(caps), margin, M))

    # ---------------------------------------------------------------- mistral
    # MistralForCausalLM.save_pretrained: the Llama layout with a sliding window of exactly T
    # keys on every layer: query i sees keys j with i - j < T, i.e. all of j <= i in these
    # T-token windows, so the reference is full causal attention (transformers' own sliding
    # mask is in the loop). Runs longer than the window are refused by asa-analyze.
    name = "mistral"
    mcfg = MistralConfig(
        **common_cfg(bos, eos),
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=False,
        sliding_window=T,
    )
    torch.manual_seed(3)
    model = MistralForCausalLM(mcfg)
    init_weights(model, seed=304)
    d = os.path.join(MODELS, name)
    model.save_pretrained(d)
    finish_dir(d)
    with open(os.path.join(d, "config.json")) as f:
        assert json.load(f)["sliding_window"] == T
    _, _, caps, logits, _, _ = plain_fixture(name, MistralForCausalLM, d)
    M, margin = write_reference(name, "softmax", ids, logits, caps)
    summary.append((name, peak_stats(caps), margin, M))

    # ---------------------------------------------------------------- gpt_neox
    # GPTNeoXForCausalLM.save_pretrained (Pythia's layout): LayerNorm with biases, a fused
    # per-head query_key_value, rotary_pct 0.5 (4 of 8 dims rotate), parallel residual,
    # exact GELU MLP, biases everywhere, untied embed_out. Reference: transformers itself
    # in float64 (transformers64_reference).
    name = "gpt_neox"
    ncfg = GPTNeoXConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=INTER,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        max_position_embeddings=MAX_POS,
        layer_norm_eps=EPS,
        rotary_pct=0.5,
        rotary_emb_base=10000,
        use_parallel_residual=True,
        hidden_act="gelu",
        bos_token_id=bos,
        eos_token_id=eos,
        tie_word_embeddings=False,
    )
    torch.manual_seed(4)
    model = GPTNeoXForCausalLM(ncfg)
    init_weights(model, seed=404, bias_std=0.3)
    d = os.path.join(MODELS, name)
    model.save_pretrained(d)
    finish_dir(d)
    with open(os.path.join(d, "config.json")) as f:
        saved_cfg = json.load(f)
    assert saved_cfg["rope_parameters"]["partial_rotary_factor"] == 0.5, saved_cfg
    logits, caps, d32 = transformers64_reference(d, GPTNeoXForCausalLM, modeling_gpt_neox, ids, "gpt_neox")
    checks.append(f"{name}: transformers float64-patched vs unpatched logits {fmt(d32)}")
    M, margin = write_reference(name, "softmax", ids, logits, caps)
    summary.append((name, peak_stats(caps), margin, M))

    # ---------------------------------------------------------------- olmo2
    # Olmo2ForCausalLM.save_pretrained: the Llama layout with GQA 4/2, norms after the
    # attention and the MLP (post_attention_layernorm, post_feedforward_layernorm; none
    # before), QK-norm over the whole q [32] and k [16] projections; untied lm_head.
    # Reference: transformers itself in float64 (transformers64_reference).
    name = "olmo2"
    ocfg = Olmo2Config(
        **common_cfg(bos, eos),
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=False,
    )
    torch.manual_seed(5)
    model = Olmo2ForCausalLM(ocfg)
    init_weights(model, seed=505)
    d = os.path.join(MODELS, name)
    model.save_pretrained(d)
    finish_dir(d)
    sd_chk = load_state(d)
    assert tuple(sd_chk["model.layers.0.self_attn.q_norm.weight"].shape) == (HEADS * HEAD_DIM,)
    assert tuple(sd_chk["model.layers.0.self_attn.k_norm.weight"].shape) == (KV_HEADS * HEAD_DIM,)
    assert "model.layers.0.input_layernorm.weight" not in sd_chk
    logits, caps, d32 = transformers64_reference(
        d, Olmo2ForCausalLM, modeling_olmo2, ids, "model", rms_cls=modeling_olmo2.Olmo2RMSNorm
    )
    checks.append(f"{name}: transformers float64-patched vs unpatched logits {fmt(d32)}")
    M, margin = write_reference(name, "softmax", ids, logits, caps)
    summary.append((name, peak_stats(caps), margin, M))

    # ---------------------------------------------------------------- phi3
    # Phi3ForCausalLM.save_pretrained: GQA 4/2, fused qkv_proj (all q rows, then k, then v)
    # and gate_up_proj (gate rows first), partial_rotary_factor 0.5, sliding_window 20 = T
    # (transformers' sliding mask in the loop, covering every key of these windows).
    # Reference: transformers itself in float64 (transformers64_reference).
    name = "phi3"
    pcfg = Phi3Config(
        **common_cfg(bos, eos),
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        tie_word_embeddings=False,
        sliding_window=T,
    )
    torch.manual_seed(6)
    model = Phi3ForCausalLM(pcfg)
    init_weights(model, seed=606)
    d = os.path.join(MODELS, name)
    model.save_pretrained(d)
    finish_dir(d)
    sd_chk = load_state(d)
    assert tuple(sd_chk["model.layers.0.self_attn.qkv_proj.weight"].shape) == ((HEADS + 2 * KV_HEADS) * HEAD_DIM, HIDDEN)
    assert tuple(sd_chk["model.layers.0.mlp.gate_up_proj.weight"].shape) == (2 * INTER, HIDDEN)
    with open(os.path.join(d, "config.json")) as f:
        saved_cfg = json.load(f)
    assert saved_cfg["rope_parameters"]["partial_rotary_factor"] == 0.5 and saved_cfg["sliding_window"] == T, saved_cfg
    logits, caps, d32 = transformers64_reference(
        d, Phi3ForCausalLM, modeling_phi3, ids, "model", rms_cls=modeling_phi3.Phi3RMSNorm
    )
    checks.append(f"{name}: transformers float64-patched vs unpatched logits {fmt(d32)}")
    M, margin = write_reference(name, "softmax", ids, logits, caps)
    summary.append((name, peak_stats(caps), margin, M))

    # ---------------------------------------------------------------- gpt2
    # GPT2LMHeadModel.save_pretrained: learned absolute positions (wpe, 64), no RoPE,
    # LayerNorm with biases, Conv1D weights ([in, out]), fused c_attn (q, k, v columns),
    # gelu_new MLP, all biases N(0, 0.3), tied wte / lm_head (not stored). Reference:
    # transformers itself in float64 (transformers64_reference).
    name = "gpt2"
    gcfg = GPT2Config(
        vocab_size=VOCAB,
        n_embd=HIDDEN,
        n_layer=LAYERS,
        n_head=HEADS,
        n_inner=INTER,
        n_positions=MAX_POS,
        layer_norm_epsilon=EPS,
        activation_function="gelu_new",
        bos_token_id=bos,
        eos_token_id=eos,
    )
    torch.manual_seed(7)
    model = GPT2LMHeadModel(gcfg)
    init_weights(model, seed=707, bias_std=0.3)
    # GPT-2 calls its LayerNorms ln_1, ln_2, ln_f: scales 1 + 0.1 N(0,1) as for the others
    g = torch.Generator().manual_seed(708)
    with torch.no_grad():
        for pname, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if ".ln_" in pname and pname.endswith(".weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
    d = os.path.join(MODELS, name)
    model.save_pretrained(d)
    finish_dir(d)
    sd_chk = load_state(d)
    assert "lm_head.weight" not in sd_chk, sorted(sd_chk)[:5]
    assert tuple(sd_chk["transformer.h.0.attn.c_attn.weight"].shape) == (HIDDEN, 3 * HIDDEN)
    logits, caps, d32 = transformers64_reference(d, GPT2LMHeadModel, modeling_gpt2, ids, "transformer")
    checks.append(f"{name}: transformers float64-patched vs unpatched logits {fmt(d32)}")
    M, margin = write_reference(name, "softmax", ids, logits, caps)
    summary.append((name, peak_stats(caps), margin, M))

    # ---------------------------------------------------------------- mixtral
    # MixtralForCausalLM.save_pretrained (block_sparse_moe.gate, experts.{e}.w1/w2/w3):
    # GQA 4/2, 4 experts of intermediate 32, 2 a token, no sliding window. Reference:
    # transformers itself in float64 (transformers64_reference; its router softmax runs in
    # float32, as transformers routes).
    name = "mixtral"
    xcfg = MixtralConfig(
        **{**common_cfg(bos, eos), "intermediate_size": 32},
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=False,
        num_local_experts=4,
        num_experts_per_tok=2,
        sliding_window=None,
    )
    torch.manual_seed(8)
    model = MixtralForCausalLM(xcfg)
    init_weights(model, seed=808)
    d = os.path.join(MODELS, name)
    model.save_pretrained(d)
    finish_dir(d)
    sd_chk = load_state(d)
    assert tuple(sd_chk["model.layers.0.block_sparse_moe.experts.3.w1.weight"].shape) == (32, HIDDEN), sorted(sd_chk)
    logits, caps, d32 = transformers64_reference(
        d, MixtralForCausalLM, modeling_mixtral, ids, "model", rms_cls=modeling_mixtral.MixtralRMSNorm
    )
    checks.append(f"{name}: transformers float64-patched vs unpatched logits {fmt(d32)}")
    M, margin = write_reference(name, "softmax", ids, logits, caps)
    summary.append((name, peak_stats(caps), margin, M))

    # ---------------------------------------------------------------- qwen2_window
    # Qwen2ForCausalLM.save_pretrained with use_sliding_window, sliding_window 6 and
    # max_window_layers 1: layer 1 attends causally, layer 2 (layer_types sliding_attention)
    # sees only keys i - 6 < j <= i, so 14 of the 19 counted queries (i >= 6) no longer see
    # the first token and the 10-100 band is empty. Reference: transformers itself in float64,
    # its own sliding mask taken from the eager attention's attention_mask.
    name = "qwen2_window"
    wcfg = Qwen2Config(
        **common_cfg(bos, eos),
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=False,
        use_sliding_window=True,
        sliding_window=6,
        max_window_layers=1,
    )
    assert wcfg.layer_types == ["full_attention", "sliding_attention"], wcfg.layer_types
    torch.manual_seed(9)
    model = Qwen2ForCausalLM(wcfg)
    init_weights(model, seed=909, bias_std=0.5)
    d = os.path.join(MODELS, name)
    model.save_pretrained(d)
    finish_dir(d)
    logits, caps, d32 = transformers64_reference(
        d, Qwen2ForCausalLM, modeling_qwen2, ids, "model", rms_cls=modeling_qwen2.Qwen2RMSNorm
    )
    assert "visible" not in caps[0] and "visible" in caps[1], "the window is not on layer 2 alone"
    vis = caps[1]["visible"]
    assert vis[19, 14] == 1 and vis[19, 13] == 0 and vis[5, 0] == 1 and vis[6, 0] == 0, vis
    checks.append(f"{name}: transformers float64-patched vs unpatched logits {fmt(d32)}")
    M, margin = write_reference(name, "softmax", ids, logits, caps)
    summary.append((name, peak_stats(caps), margin, M))

    # ---------------------------------------------------------------- qwen3_moe
    # Qwen3MoeForCausalLM.save_pretrained: Qwen3's per-head QK-norm attention; layer 1 a dense
    # SwiGLU MLP (mlp_only_layers [0]), layer 2 a mixture of 4 experts of intermediate 24
    # (mlp.gate, mlp.experts.{e}.gate_proj/up_proj/down_proj), 2 a token, norm_topk_prob
    # false: the chosen probabilities are not renormalised. init seed 1010. Reference:
    # transformers in float64 (experts by its plain loop; its router softmax is float32).
    name = "qwen3_moe"
    qmcfg = Qwen3MoeConfig(
        **common_cfg(bos, eos),
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=False,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=24,
        norm_topk_prob=False,
        decoder_sparse_step=1,
        mlp_only_layers=[0],
    )
    torch.manual_seed(10)
    model = Qwen3MoeForCausalLM(qmcfg)
    init_weights(model, seed=1010)
    d = os.path.join(MODELS, name)
    model.save_pretrained(d)
    finish_dir(d)
    sd_chk = load_state(d)
    assert tuple(sd_chk["model.layers.1.mlp.experts.3.gate_proj.weight"].shape) == (24, HIDDEN), sorted(sd_chk)
    assert tuple(sd_chk["model.layers.1.mlp.gate.weight"].shape) == (4, HIDDEN)
    assert tuple(sd_chk["model.layers.0.mlp.gate_proj.weight"].shape) == (INTER, HIDDEN)
    logits, caps, d32 = transformers64_reference(
        d, Qwen3MoeForCausalLM, modeling_qwen3_moe, ids, "model", rms_cls=modeling_qwen3_moe.Qwen3MoeRMSNorm
    )
    checks.append(f"{name}: transformers float64-patched vs unpatched logits {fmt(d32)}")
    M, margin = write_reference(name, "softmax", ids, logits, caps)
    summary.append((name, peak_stats(caps), margin, M))

    # ---------------------------------------------------------------- rope_linear / _dynamic / _yarn
    # LlamaForCausalLM.save_pretrained with the RoPE scalings of modeling_rope_utils: linear
    # (factor 4: every frequency / 4), dynamic NTK (factor 2 with max_position_embeddings 16 <
    # T = 20: the base grows for the 20-token forward pass) and YaRN (factor 4, original length
    # 16: pair 0 extrapolated, pairs 1-3 interpolated, cos/sin times 0.1 ln 4 + 1). Reference:
    # transformers in float64 with its own scaled inv_freq (float32, upcast).
    for name, rope_params, max_pos, seed in (
        ("rope_linear", {"rope_type": "linear", "factor": 4.0}, MAX_POS, 1101),
        ("rope_dynamic", {"rope_type": "dynamic", "factor": 2.0}, 16, 1102),
        ("rope_yarn", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}, MAX_POS, 1103),
    ):
        rcfg = LlamaConfig(
            **{**common_cfg(bos, eos), "max_position_embeddings": max_pos},
            rope_parameters={"rope_theta": 10000.0, **rope_params},
            tie_word_embeddings=False,
        )
        torch.manual_seed(seed)
        model = LlamaForCausalLM(rcfg)
        init_weights(model, seed=seed)
        d = os.path.join(MODELS, name)
        model.save_pretrained(d)
        finish_dir(d)
        with open(os.path.join(d, "config.json")) as f:
            saved = json.load(f)
        assert saved["rope_parameters"]["rope_type"] == rope_params["rope_type"], saved["rope_parameters"]
        logits, caps, d32 = transformers64_reference(
            d, LlamaForCausalLM, modeling_llama, ids, "model", rms_cls=modeling_llama.LlamaRMSNorm
        )
        checks.append(f"{name}: transformers float64-patched vs unpatched logits {fmt(d32)}")
        M, margin = write_reference(name, "softmax", ids, logits, caps)
        summary.append((name, peak_stats(caps), margin, M))

    # ---------------------------------------------------------------- gemma3
    # Gemma3ForCausalLM.save_pretrained (model_type gemma3_text): Gemma 2's sandwich norms,
    # GeGLU and embedding scale, per-head QK-norm scaled by (1 + w), query_pre_attn_scalar 12,
    # no soft-caps (Gemma3TextConfig's default), layer 1 a sliding window of 6 with its own
    # RoPE (theta 10000), layer 2 global with theta 1e6 and linear scaling factor 2 (as the
    # larger Gemma 3 checkpoints scale their global layers); init seed 1401. Reference:
    # transformers in float64 (each layer type's inv_freq; Gemma3RMSNorm in float64).
    name = "gemma3"
    g3cfg = Gemma3TextConfig(
        **{k: v for k, v in common_cfg(bos, eos).items() if k != "hidden_act"},
        hidden_activation="gelu_pytorch_tanh",
        query_pre_attn_scalar=12,
        sliding_window=6,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000000.0},
        },
        tie_word_embeddings=True,
    )
    assert g3cfg.attn_logit_softcapping is None and g3cfg.final_logit_softcapping is None
    torch.manual_seed(14)
    model = Gemma3ForCausalLM(g3cfg)
    init_weights(model, seed=1401)
    d = os.path.join(MODELS, name)
    model.save_pretrained(d)
    finish_dir(d)
    with open(os.path.join(d, "config.json")) as f:
        saved = json.load(f)
    assert saved["model_type"] == "gemma3_text", saved["model_type"]
    sd_chk = load_state(d)
    assert tuple(sd_chk["model.layers.0.self_attn.q_norm.weight"].shape) == (HEAD_DIM,)
    logits, caps, d32 = transformers64_reference(
        d, Gemma3ForCausalLM, modeling_gemma3, ids, "model",
        rms_cls=modeling_gemma3.Gemma3RMSNorm, rms_forward=_gemma_rms_forward64,
    )
    assert "visible" in caps[0] and "visible" not in caps[1]
    checks.append(f"{name}: transformers float64-patched vs unpatched logits {fmt(d32)}")
    q_scale = lambda l, h, i, j, s: s * math.sqrt(HEAD_DIM) * 12 ** -0.5  # noqa: E731
    M, margin = write_reference(name, "softmax", ids, logits, caps, logit_fn=q_scale)
    summary.append((name, peak_stats(caps), margin, M))

    # gemma3_multimodal: Gemma3ForConditionalGeneration.save_pretrained (model_type gemma3,
    # the text model's config nested in text_config, its tensors as language_model.model.*,
    # beside a 1-layer SigLIP vision tower and the projector) holding gemma3's text weights:
    # on text input transformers gives gemma3's logits exactly, so it shares that reference.
    text_model = Gemma3ForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    mmcfg = Gemma3Config(
        text_config=text_model.config.to_dict(),
        vision_config=SiglipVisionConfig(
            hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28, patch_size=14
        ).to_dict(),
        mm_tokens_per_image=4,
        boi_token_index=VOCAB - 4,
        eoi_token_index=VOCAB - 3,
        image_token_index=VOCAB - 2,
    )
    torch.manual_seed(15)
    mm = Gemma3ForConditionalGeneration(mmcfg).eval()
    text_sd = {f"model.language_model.{k[len('model.'):]}": v for k, v in text_model.state_dict().items() if k.startswith("model.")}
    missing, unexpected = mm.load_state_dict(text_sd, strict=False)
    assert not unexpected and not [k for k in missing if "language_model" in k], (missing, unexpected)
    dmm = os.path.join(MODELS, "gemma3_multimodal")
    mm.save_pretrained(dmm)
    finish_dir(dmm)
    with safe_open(os.path.join(dmm, "model.safetensors"), framework="pt") as f:
        stored = list(f.keys())
    assert "language_model.model.layers.1.self_attn.q_norm.weight" in stored, sorted(stored)[:5]
    assert any(k.startswith("vision_tower.") for k in stored) and any(k.startswith("multi_modal_projector.") for k in stored)
    with torch.no_grad():
        lt = text_model(input_ids=ids).logits
        lm = Gemma3ForConditionalGeneration.from_pretrained(dmm, dtype=torch.float32).eval()(input_ids=ids).logits
    dmm_text = (lt - lm).abs().max().item()
    assert dmm_text == 0.0, dmm_text
    checks.append(f"gemma3_multimodal: Gemma3ForConditionalGeneration on text vs Gemma3ForCausalLM logits {fmt(dmm_text)}")

    # ---------------------------------------------------------------- phi3_longrope
    # Phi3ForCausalLM.save_pretrained as Phi-3's long-context checkpoints configure it:
    # rope_type longrope with per-pair long and short factors, original_max_position_embeddings
    # 16 < T = 20, so the long factors apply (as longrope_frequency_update picks them), and the
    # attention factor sqrt(1 + ln(64 / 16) / ln 16) scales cos/sin; partial rotary 0.5 (2 pairs).
    # init seed 1301. Reference: transformers in float64 with its own longrope inv_freq.
    name = "phi3_longrope"
    plcfg = Phi3Config(
        **common_cfg(bos, eos),
        rope_parameters={
            "rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
            "long_factor": [1.5, 3.0], "short_factor": [1.0, 1.25],
        },
        original_max_position_embeddings=16,
        tie_word_embeddings=False,
    )
    torch.manual_seed(13)
    model = Phi3ForCausalLM(plcfg)
    init_weights(model, seed=1301)
    d = os.path.join(MODELS, name)
    model.save_pretrained(d)
    finish_dir(d)
    with open(os.path.join(d, "config.json")) as f:
        saved = json.load(f)
    assert saved["rope_parameters"]["rope_type"] == "longrope", saved
    logits, caps, d32 = transformers64_reference(
        d, Phi3ForCausalLM, modeling_phi3, ids, "model", rms_cls=modeling_phi3.Phi3RMSNorm
    )
    checks.append(f"{name}: transformers float64-patched vs unpatched logits {fmt(d32)}")
    M, margin = write_reference(name, "softmax", ids, logits, caps)
    summary.append((name, peak_stats(caps), margin, M))

    # ---------------------------------------------------------------- gemma2
    # Gemma2ForCausalLM.save_pretrained: RMSNorm scaled by (1 + w) before and after attention
    # and MLP, a gelu_pytorch_tanh GeGLU, embeddings times sqrt(32), q.k times
    # query_pre_attn_scalar 12 ^ -1/2 (not head_dim 8), attention logits soft-capped at 2.5
    # (tanh bends them: |s| reaches about 3 here) and next-token logits at 3.0, layer 1 a
    # sliding window of 6 (Gemma2Config's default layer_types: even layers slide), layer 2
    # causal, tied embeddings; init seed 1201. Reference: transformers in float64 (its eager
    # attention's softcap applied by the float64 patch, Gemma2RMSNorm in float64).
    name = "gemma2"
    gmcfg = Gemma2Config(
        **{k: v for k, v in common_cfg(bos, eos).items() if k != "hidden_act"},
        hidden_activation="gelu_pytorch_tanh",
        query_pre_attn_scalar=12,
        attn_logit_softcapping=2.5,
        final_logit_softcapping=3.0,
        sliding_window=6,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    assert gmcfg.layer_types == ["sliding_attention", "full_attention"], gmcfg.layer_types
    torch.manual_seed(12)
    model = Gemma2ForCausalLM(gmcfg)
    init_weights(model, seed=1201)
    d = os.path.join(MODELS, name)
    model.save_pretrained(d)
    finish_dir(d)
    logits, caps, d32 = transformers64_reference(
        d, Gemma2ForCausalLM, modeling_gemma2, ids, "model",
        rms_cls=modeling_gemma2.Gemma2RMSNorm, rms_forward=_gemma_rms_forward64,
    )
    assert "visible" in caps[0] and "visible" not in caps[1]
    raw_max = max((c["q"] @ modeling_gemma2.repeat_kv(c["k"], 2).transpose(2, 3)).abs().max().item() for c in caps) * 12 ** -0.5
    assert raw_max > 2.5, ("the soft-cap must bend some logits", raw_max)
    checks.append(f"{name}: transformers float64-patched vs unpatched logits {fmt(d32)}; largest |q.k| scaled {raw_max:.3f}")
    cap_fn = lambda l, h, i, j, s: 2.5 * math.tanh(s * math.sqrt(HEAD_DIM) * 12 ** -0.5 / 2.5)  # noqa: E731
    M, margin = write_reference(name, "softmax", ids, logits, caps, logit_fn=cap_fn)
    summary.append((name, peak_stats(caps), margin, M))

    # ---------------------------------------------------------------- gemma2_like_2b, gemma3_like_1b
    # Gemma 2 and Gemma 3 configured as the released 2B and 1B checkpoints are in what a GGUF
    # file can say: query_pre_attn_scalar = head_dim (llama.cpp scales q.k by head_dim^-1/2
    # below 27B and has no key for it), Gemma 2's default soft-caps 50 / 30 (tanh barely
    # bends these logits; the gemma2 fixture covers the cap) and layer_types (even layers
    # slide, window 6); Gemma 3 with sliding_window_pattern 6, so both of its 2 layers slide
    # (window 6, RoPE theta 10000), as llama.cpp's pattern reads them. Written to GGUF by
    # tools/smollm2.py fixtures. init seeds 1501, 1602 (the tied embeddings then halved; with
    # seed 1601 float32's q at layer 2 strayed 1.1e-5 from float64, past the 1e-5 tolerance).
    # Reference: transformers in float64.
    name = "gemma2_like_2b"
    g2l = Gemma2Config(
        **{k: v for k, v in common_cfg(bos, eos).items() if k != "hidden_act"},
        hidden_activation="gelu_pytorch_tanh",
        query_pre_attn_scalar=HEAD_DIM,
        sliding_window=6,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    assert g2l.attn_logit_softcapping == 50.0 and g2l.final_logit_softcapping == 30.0
    torch.manual_seed(16)
    model = Gemma2ForCausalLM(g2l)
    init_weights(model, seed=1501)
    with torch.no_grad():  # tied embeddings at half the scale: logits f32 can check to 1e-5
        model.model.embed_tokens.weight.mul_(0.5)
    d = os.path.join(MODELS, name)
    model.save_pretrained(d)
    finish_dir(d)
    logits, caps, d32 = transformers64_reference(
        d, Gemma2ForCausalLM, modeling_gemma2, ids, "model",
        rms_cls=modeling_gemma2.Gemma2RMSNorm, rms_forward=_gemma_rms_forward64,
    )
    assert "visible" in caps[0] and "visible" not in caps[1]
    checks.append(f"{name}: transformers float64-patched vs unpatched logits {fmt(d32)}")
    cap50 = lambda l, h, i, j, s: 50.0 * math.tanh(s / 50.0)  # noqa: E731
    M, margin = write_reference(name, "softmax", ids, logits, caps, logit_fn=cap50)
    summary.append((name, peak_stats(caps), margin, M))

    name = "gemma3_like_1b"
    g3l = Gemma3TextConfig(
        **{k: v for k, v in common_cfg(bos, eos).items() if k != "hidden_act"},
        hidden_activation="gelu_pytorch_tanh",
        query_pre_attn_scalar=HEAD_DIM,
        sliding_window=6,
        sliding_window_pattern=6,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
        },
        tie_word_embeddings=True,
    )
    assert g3l.layer_types == ["sliding_attention", "sliding_attention"], g3l.layer_types
    torch.manual_seed(17)
    model = Gemma3ForCausalLM(g3l)
    init_weights(model, seed=1602)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(0.5)
    d = os.path.join(MODELS, name)
    model.save_pretrained(d)
    finish_dir(d)
    logits, caps, d32 = transformers64_reference(
        d, Gemma3ForCausalLM, modeling_gemma3, ids, "model",
        rms_cls=modeling_gemma3.Gemma3RMSNorm, rms_forward=_gemma_rms_forward64,
    )
    assert "visible" in caps[0] and "visible" in caps[1]
    checks.append(f"{name}: transformers float64-patched vs unpatched logits {fmt(d32)}")
    M, margin = write_reference(name, "softmax", ids, logits, caps)
    summary.append((name, peak_stats(caps), margin, M))

    # ---------------------------------------------------------------- gpt_oss, gpt_oss_mxfp4
    # GptOssForCausalLM.save_pretrained: learned sinks (self_attn.sinks, N(0, 1.5^2) so they
    # take a real share), biases on q/k/v/o (N(0, 0.5^2)), layer 1 a sliding window of 6 and
    # layer 2 causal (GptOssConfig's default layer_types), GptOssConfig's default RoPE (theta
    # 150000, YaRN factor 32 over 4096 positions, not truncated: pairs 1-2 on the ramp, cos/sin
    # times 0.1 ln 32 + 1), 4 experts of 32 stacked in mlp.experts.gate_up_proj (gate and up
    # interleaved) / down_proj with biases, 2 a token by softmax over the top-2 router logits
    # (mlp.router with a bias), the clamped SwiGLU with swiglu_limit 1 (clamping binds, see
    # the check). The expert matrices are rounded to MXFP4 first, so gpt_oss_mxfp4 (the same
    # model with the experts as _blocks/_scales, quantization_config mxfp4, as the released
    # checkpoints) shares this reference: transformers itself loads it (Mxfp4Config
    # dequantize=True) to the same logits. Reference: transformers in float64 (its eager
    # attention's sink column, GptOssRMSNorm and the half-width RoPE in float64).
    name = "gpt_oss"
    gocfg = GptOssConfig(
        **{**common_cfg(bos, eos), "intermediate_size": 32, "max_position_embeddings": 131072},
        num_local_experts=4,
        num_experts_per_tok=2,
        sliding_window=6,
        swiglu_limit=1.0,
        tie_word_embeddings=False,
    )
    assert gocfg.layer_types == ["sliding_attention", "full_attention"], gocfg.layer_types
    assert gocfg.rope_parameters["rope_type"] == "yarn" and gocfg.rope_parameters["rope_theta"] == 150000.0
    torch.manual_seed(13)
    model = GptOssForCausalLM(gocfg)
    init_weights(model, seed=1301, bias_std=0.5)
    packed = {}
    with torch.no_grad():
        g = torch.Generator().manual_seed(1302)
        for l in range(LAYERS):
            model.model.layers[l].self_attn.sinks.copy_(1.5 * torch.randn(HEADS, generator=g))
            experts = model.model.layers[l].mlp.experts
            for proj in ("gate_up_proj", "down_proj"):
                param = getattr(experts, proj)  # [E, in, out]
                blocks, scales = mxfp4_quantize(param.transpose(1, 2))
                param.copy_(convert_moe_packed_tensors(blocks, scales, dtype=torch.float32))
                packed[f"model.layers.{l}.mlp.experts.{proj}_blocks"] = blocks
                packed[f"model.layers.{l}.mlp.experts.{proj}_scales"] = scales
    d = os.path.join(MODELS, name)
    model.save_pretrained(d)
    finish_dir(d)
    sd_chk = load_state(d)
    assert tuple(sd_chk["model.layers.0.mlp.experts.gate_up_proj"].shape) == (4, HIDDEN, 64), sorted(sd_chk)
    # the MXFP4 twin: every other tensor as saved, the experts packed
    dm = os.path.join(MODELS, "gpt_oss_mxfp4")
    os.makedirs(dm)
    tensors = {k: v.to(torch.float32).contiguous() for k, v in sd_chk.items() if not k.endswith(("gate_up_proj", "down_proj"))}
    tensors.update(packed)
    save_file(tensors, os.path.join(dm, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(d, "config.json")) as f:
        mcfg = json.load(f)
    mcfg["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"],
    }
    write_json(os.path.join(dm, "config.json"), mcfg)
    finish_dir(dm)
    from transformers import Mxfp4Config
    with torch.no_grad():
        plain = GptOssForCausalLM.from_pretrained(d, dtype=torch.float32).eval()(input_ids=ids).logits
        quant = GptOssForCausalLM.from_pretrained(
            dm, dtype=torch.float32, quantization_config=Mxfp4Config(dequantize=True)
        ).eval()(input_ids=ids).logits
    dmx = (plain - quant).abs().max().item()
    assert dmx == 0.0, dmx
    clamped = []
    apply_gate = modeling_gpt_oss.GptOssExperts._apply_gate

    def counting_gate(self, gate_up):
        gate, up = gate_up[..., ::2], gate_up[..., 1::2]
        clamped.append(((gate > self.limit).sum() + (up.abs() > self.limit).sum()).item() / (2 * gate.numel()))
        return apply_gate(self, gate_up)

    modeling_gpt_oss.GptOssExperts._apply_gate = counting_gate
    try:
        logits, caps, d32 = transformers64_reference(
            d, GptOssForCausalLM, modeling_gpt_oss, ids, "model", rms_cls=modeling_gpt_oss.GptOssRMSNorm
        )
    finally:
        modeling_gpt_oss.GptOssExperts._apply_gate = apply_gate
    share = sum(clamped) / len(clamped)
    assert 0.1 < share < 0.9, ("swiglu_limit must bind on part of the values", share)
    assert "visible" in caps[0] and "visible" not in caps[1]
    assert all("sink_mass" in c for c in caps)
    checks.append(
        f"{name}: transformers float64-patched vs unpatched logits {fmt(d32)}; gpt_oss_mxfp4 through "
        f"transformers' MXFP4 dequantization vs gpt_oss: logits {fmt(dmx)}; share of gate/up values clamped {share:.2f}"
    )
    M, margin = write_reference(name, "sink", ids, logits, caps)
    summary.append((name, peak_stats(caps), margin, M))

    # ---------------------------------------------------------------- variants
    vcfg = LlamaConfig(
        **common_cfg(bos, eos), rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, tie_word_embeddings=False
    )
    vcfg.architectures = ["LlamaForCausalLM"]
    base_cfg_json = json.loads(vcfg.to_json_string(use_diff=True))

    variants = [
        # name, variant, config variant field, affine block, seed
        ("off_by_one", "off_by_one", "off_by_one", None, 303),
        ("sink", "sink", None, None, 404),
        ("gated", "gated", "gated", None, 505),
        ("affine_scaled", "affine_scaled", "affine_scaled",
         {"activation": "linear_clipping", "beta_length": "full", "momentum": 0.9}, 606),
        ("affine_scaled_sigmoid_visible", "affine_scaled", "affine_scaled",
         {"activation": "sigmoid", "beta_length": "visible", "momentum": 0.9}, 707),
        ("affine_scaled_gated", "affine_scaled_gated", "affine_scaled_gated",
         {"activation": "linear_clipping", "beta_length": "full", "momentum": 0.9}, 808),
    ]
    for name, variant, cfg_field, affine, seed in variants:
        torch.manual_seed(seed)
        base = LlamaForCausalLM(vcfg)
        init_weights(base, seed=seed)
        base_sd = {k: v.detach().clone().contiguous() for k, v in base.state_dict().items()}
        gen = torch.Generator().manual_seed(seed + 1)
        extra = {}
        gated = variant in ("gated", "affine_scaled_gated")
        is_affine = affine is not None
        sd = dict(base_sd)
        for l in range(LAYERS):
            p = f"model.layers.{l}.self_attn."
            if variant == "sink":
                extra[p + "sinks"] = torch.randn(HEADS, generator=gen)
            if gated:
                wq = base_sd[p + "q_proj.weight"].view(HEADS, HEAD_DIM, HIDDEN)
                wg = INIT_STD * torch.randn(HEADS, HEAD_DIM, HIDDEN, generator=gen)
                sd[p + "q_proj.weight"] = torch.cat([wq, wg], dim=1).reshape(HEADS * 2 * HEAD_DIM, HIDDEN).contiguous()
            if is_affine:
                if affine["activation"] == "linear_clipping":
                    extra[p + "alpha_proj.weight"] = 1.2 * torch.randn(HEADS, HIDDEN, generator=gen)
                    extra[p + "alpha_proj.bias"] = 2.0 * torch.randn(HEADS, generator=gen)
                else:
                    extra[p + "alpha_proj.weight"] = 0.5 * torch.randn(HEADS, HIDDEN, generator=gen)
                extra[p + "alpha_ma"] = 0.2 + 0.7 * torch.rand(HEADS, generator=gen)
        sd.update(extra)
        sd = {k: v.to(torch.float32).contiguous() for k, v in sd.items()}

        d = os.path.join(MODELS, name)
        os.makedirs(d)
        save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        jc = dict(base_cfg_json)
        jc["dtype"] = "float32"
        if cfg_field is not None:
            jc["attention_variant"] = cfg_field
        if affine is not None:
            jc["affine_scaled"] = dict(affine)
        write_json(os.path.join(d, "config.json"), jc)
        finish_dir(d)

        # --- neutral check: variant code with neutral parameters == plain transformers
        with open(os.path.join(d, "config.json")) as f:
            jcfg = json.load(f)
        sd64 = load_state(d)
        inv64, _ = rope_inv_freq(jcfg)
        with tempfile.TemporaryDirectory() as tmp:
            plain = LlamaForCausalLM(vcfg)
            psd = {k: v for k, v in sd.items() if k in base_sd}
            for l in range(LAYERS):
                k_ = f"model.layers.{l}.self_attn.q_proj.weight"
                psd[k_] = base_sd[k_].to(torch.float32)
            plain.load_state_dict(psd, strict=True)
            plain.save_pretrained(tmp)
            _, lg_plain, at_plain = hf_forward(tmp, LlamaForCausalLM, ids, inv64, precise=True)
        neutral = dict(sd64)
        override = None
        neutral_desc = []
        if variant == "off_by_one":
            # off_by_one has no parameter to neutralise; check it equals GPT-OSS sink math with S_h = 0
            zs = dict(sd64)
            for l in range(LAYERS):
                zs[f"model.layers.{l}.self_attn.sinks"] = torch.zeros(HEADS, dtype=TORCH64)
            lo, co = own_forward(sd64, jcfg, ids, "off_by_one")
            ls, cs = own_forward(zs, jcfg, ids, "sink")
            dob = max((lo - ls).abs().max().item(),
                      max((a["pattern"] - b["pattern"]).abs().max().item() for a, b in zip(co, cs)))
            assert dob < 1e-12, dob
            checks.append(f"off_by_one: stable off-by-one formula vs GPT-OSS sink path with S_h = 0: {fmt(dob)} (assert < 1e-12)")
            nv = "sink"
            for l in range(LAYERS):
                neutral[f"model.layers.{l}.self_attn.sinks"] = torch.full((HEADS,), float("-inf"), dtype=TORCH64)
            neutral_desc.append("off_by_one checked via sink path with sinks=-inf")
        else:
            nv = variant
        if variant == "sink":
            for l in range(LAYERS):
                neutral[f"model.layers.{l}.self_attn.sinks"] = torch.full((HEADS,), float("-inf"), dtype=TORCH64)
            neutral_desc.append("sinks=-inf")
        if is_affine:
            big = 10.0 if affine["activation"] == "linear_clipping" else 1000.0
            for l in range(LAYERS):
                p = f"model.layers.{l}.self_attn."
                neutral[p + "alpha_proj.weight"] = torch.zeros(HEADS, HIDDEN, dtype=TORCH64)
                neutral[p + "alpha_proj.bias"] = torch.full((HEADS,), big, dtype=TORCH64)
                neutral[p + "alpha_ma"] = torch.ones(HEADS, dtype=TORCH64)
            neutral_desc.append(f"alpha_proj weight 0 bias {big:g} (alpha=1), alpha_ma=1")
        if gated:
            override = float("inf")
            neutral_desc.append("gate logits forced to +inf")
        ln, cn = own_forward(neutral, jcfg, ids, nv, affine=affine, gate_logit_override=override)
        dn = (ln - lg_plain).abs().max().item()
        dna = max((c["pattern"] - a).abs().max().item() for c, a in zip(cn, at_plain))
        assert dn < 1e-12 and dna < 1e-12, (name, dn, dna)
        checks.append(f"{name}: neutral ({', '.join(neutral_desc)}) vs plain transformers LlamaForCausalLM "
                      f"(float64 patch): logits {fmt(dn)}, pattern {fmt(dna)} (assert < 1e-12)")

        # --- the reference itself
        logits, caps = own_forward(sd64, jcfg, ids, variant, affine=affine)
        # closed-form identities of the variant weights
        ana = 0.0
        for l, c in enumerate(caps):
            rs = c["pattern"].sum(-1)
            lse = torch.logsumexp(c["attn_scores"], dim=-1)  # [B, H, T]
            if variant == "sink":
                S = sd64[f"model.layers.{l}.self_attn.sinks"].view(1, HEADS, 1)
                want = torch.exp(S - torch.logaddexp(lse, S.expand_as(lse)))
                ana = max(ana, (c["sink_mass"] - want).abs().max().item(), (1 - rs - want).abs().max().item())
            if variant == "off_by_one":
                want = torch.exp(-torch.logaddexp(lse, torch.zeros_like(lse)))
                ana = max(ana, (c["sink_mass"] - want).abs().max().item(), (1 - rs - want).abs().max().item())
            if is_affine:
                ama = sd64[f"model.layers.{l}.self_attn.alpha_ma"].view(1, HEADS, 1)
                al = c["alpha"]
                i1 = torch.arange(1, T + 1, dtype=TORCH64).view(1, 1, T)
                N = float(T) if affine["beta_length"] == "full" else i1
                ana = max(ana, (rs - (al + i1 * (ama - al) / N)).abs().max().item())
                if affine["beta_length"] == "full":  # the last query's row sums to alpha_ma exactly
                    ana = max(ana, (rs[:, :, -1] - ama[:, :, 0]).abs().max().item())
                else:  # visible: every row sums to alpha_ma
                    ana = max(ana, (rs - ama).abs().max().item())
        assert ana < 1e-12, (name, ana)
        if variant in ("sink", "off_by_one") or is_affine:
            checks.append(f"{name}: closed-form row sums / sink mass identities: {fmt(ana)} (assert < 1e-12)")
        alpha_ma = None
        extra_info = ""
        if is_affine:
            alpha_ma = [sd64[f"model.layers.{l}.self_attn.alpha_ma"].tolist() for l in range(LAYERS)]
            z = torch.cat([c["alpha_pre"].reshape(-1) for c in caps])
            if affine["activation"] == "linear_clipping":
                lo_f = (z <= -5).double().mean().item()
                hi_f = (z >= 5).double().mean().item()
                mid = 1 - lo_f - hi_f
                assert min(lo_f, hi_f, mid) > 0.1, (lo_f, mid, hi_f)
                extra_info += f" pre-activation w.x+b: <=-5 {lo_f:.3f}, linear {mid:.3f}, >=5 {hi_f:.3f};"
            al = torch.cat([c["alpha"].reshape(-1) for c in caps])
            neg = sum(int((c["pattern"] < 0).sum()) for c in caps)
            extra_info += f" alpha range [{al.min().item():.3f}, {al.max().item():.3f}]; negative a_ij cells {neg};"
        if gated:
            gt = torch.cat([c["gate"].reshape(-1) for c in caps])
            extra_info += f" gate range [{gt.min().item():.3f}, {gt.max().item():.3f}];"
        if "sink_mass" in caps[0]:
            sm = torch.cat([c["sink_mass"].reshape(-1) for c in caps])
            extra_info += f" sink_mass range [{sm.min().item():.3f}, {sm.max().item():.3f}];"
        M, margin = write_reference(name, variant, ids, logits, caps, alpha_ma)
        summary.append((name, peak_stats(caps), margin, M, extra_info))

    # ---------------------------------------------------------------- qwen3
    # Qwen3 dense as transformers writes it: q_norm / k_norm per head, no q/k/v bias, and a
    # head_dim (12) that is not hidden / heads (8): q_proj is [48, 32], o_proj [32, 48].
    name = "qwen3"
    q3cfg = Qwen3Config(
        **{**common_cfg(bos, eos), "head_dim": QWEN3_HEAD_DIM},
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=False,
        use_sliding_window=False,
        max_window_layers=LAYERS,
    )
    torch.manual_seed(9)
    model = Qwen3ForCausalLM(q3cfg)
    init_weights(model, seed=909)
    d = os.path.join(MODELS, name)
    model.save_pretrained(d)
    finish_dir(d)
    sd_chk = load_state(d)
    assert sd_chk["model.layers.0.self_attn.q_proj.weight"].shape == (HEADS * QWEN3_HEAD_DIM, HIDDEN)
    assert sd_chk["model.layers.0.self_attn.q_norm.weight"].shape == (QWEN3_HEAD_DIM,)
    assert not any(k.endswith(".bias") for k in sd_chk), "qwen3 has no biases"
    with open(os.path.join(d, "config.json")) as f:
        assert json.load(f)["head_dim"] == QWEN3_HEAD_DIM
    _, _, caps, logits, _, _ = plain_fixture(name, Qwen3ForCausalLM, d)
    M, margin = write_reference(name, "softmax", ids, logits, caps)
    summary.append((name, peak_stats(caps), margin, M, f" head_dim {QWEN3_HEAD_DIM}, QK-norm;"))

    # ---------------------------------------------------------------- scale_invariant, logn
    # Both are written from plain transformers models plus what the variant adds; the
    # reference is this script's own path, checked against transformers itself with the
    # variant's logit rule patched into its (float64) eager attention.
    def transformers_check(name, cls, hf_cfg, sd, jcfg, variant, transform, neutral_cfg=None):
        inv64, branches = rope_inv_freq(jcfg)
        sd64 = {k: v.to(TORCH64) for k, v in sd.items()}
        with tempfile.TemporaryDirectory() as tmp:
            plain = cls(hf_cfg)
            plain.load_state_dict({k: v for k, v in sd.items() if not k.endswith("logn_scale")}, strict=True)
            plain.save_pretrained(tmp)
            _, lg_hf, at_hf = hf_forward(tmp, cls, ids, inv64, precise=True, logit_transform=transform)
            lo, co = own_forward(sd64, jcfg, ids, variant)
            dl = (lo - lg_hf).abs().max().item()
            da = max((c["pattern"] - a).abs().max().item() for c, a in zip(co, at_hf))
            assert dl < 1e-12 and da < 1e-12, (name, dl, da)
            checks.append(f"{name}: own path vs transformers {cls.__name__} with the logit rule patched into "
                          f"eager attention (float64 patch, rope inv_freq {branches.count('rotate') or 'all'} "
                          f"rotating): logits {fmt(dl)}, pattern {fmt(da)} (assert < 1e-12)")
            if neutral_cfg is not None:
                _, lg_p, at_p = hf_forward(tmp, cls, ids, inv64, precise=True)
                ln_, cn = own_forward(sd64, neutral_cfg, ids, variant)
                dn = (ln_ - lg_p).abs().max().item()
                dna = max((c["pattern"] - a).abs().max().item() for c, a in zip(cn, at_p))
                assert dn < 1e-12 and dna < 1e-12, (name, dn, dna)
                checks.append(f"{name}: tau = inf vs plain transformers {cls.__name__} (same p-RoPE "
                              f"inv_freq): logits {fmt(dn)}, pattern {fmt(dna)} (assert < 1e-12)")
        return sd64

    def write_variant_dir(name, sd, jc):
        d = os.path.join(MODELS, name)
        os.makedirs(d)
        save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        write_json(os.path.join(d, "config.json"), jc)
        finish_dir(d)
        with open(os.path.join(d, "config.json")) as f:
            return json.load(f)

    # scale_invariant: Qwen3 (QK-norm) with p-RoPE, spacing log, p = 0.5, rope_theta 1024
    # (the paper's setting), head_dim 16: n = 4 pairs rotate at 1024^(-k/3), 4 have frequency 0.
    name = "scale_invariant"
    si_hf = Qwen3Config(
        **{**common_cfg(bos, eos), "head_dim": SI_HEAD_DIM},
        rope_parameters={"rope_type": "default", "rope_theta": 1024.0},
        tie_word_embeddings=False,
        use_sliding_window=False,
        max_window_layers=LAYERS,
    )
    si_hf.architectures = ["Qwen3ForCausalLM"]
    torch.manual_seed(10)
    base = Qwen3ForCausalLM(si_hf)
    init_weights(base, seed=1010)
    sd = {k: v.detach().clone().to(torch.float32).contiguous() for k, v in base.state_dict().items()}
    jc = json.loads(si_hf.to_json_string(use_diff=True))
    jc["dtype"] = "float32"
    jc["rope_parameters"] = {"rope_type": "p_rope", "p": 0.5, "rope_theta": 1024.0, "spacing": "log"}
    jc["attention_variant"] = "scale_invariant"
    jc["scale_invariant"] = {"tau": SI_TAU}
    jcfg = write_variant_dir(name, sd, jc)
    inv64, _ = rope_inv_freq(jcfg)
    want_inv = [1.0, 1024 ** (-1 / 3), 1024 ** (-2 / 3), 1 / 1024, 0, 0, 0, 0]
    assert (inv64 - torch.tensor(want_inv, dtype=TORCH64)).abs().max() < 1e-15, inv64

    def si_rule(scores, layer_idx):
        Tq, Tk = scores.shape[-2:]
        t = (torch.arange(Tq, dtype=TORCH64)[:, None] - torch.arange(Tk, dtype=TORCH64)[None, :]).clamp(min=0)
        x = torch.log(1.0 + t / SI_TAU)
        return torch.sqrt(1.0 + 2.0 * x) * scores - 2.0 * x

    neutral = json.loads(json.dumps(jcfg))
    neutral["scale_invariant"]["tau"] = float("inf")
    sd64 = transformers_check(name, Qwen3ForCausalLM, si_hf, sd, jcfg, "scale_invariant", si_rule, neutral)
    logits, caps = own_forward(sd64, jcfg, ids, "scale_invariant")

    def si_logit(l, h, i, j, s_):
        x = math.log(1.0 + (i - j) / SI_TAU)
        return math.sqrt(1.0 + 2.0 * x) * s_ - 2.0 * x

    M, margin = write_reference(name, "scale_invariant", ids, logits, caps, logit_fn=si_logit)
    summary.append((name, peak_stats(caps), margin, M, f" tau {SI_TAU}, p-RoPE log p 0.5 theta 1024, QK-norm;"))

    # logn: Llama + self_attn.logn_scale [heads] ~ U(0.4, 1.2); config.json also has
    # "logn": {"scale": 1.0}, which the stored tensor overrides.
    name = "logn"
    torch.manual_seed(11)
    base = LlamaForCausalLM(vcfg)
    init_weights(base, seed=1111)
    sd = {k: v.detach().clone().to(torch.float32).contiguous() for k, v in base.state_dict().items()}
    gen = torch.Generator().manual_seed(1112)
    scales = []
    for l in range(LAYERS):
        sc = (0.4 + 0.8 * torch.rand(HEADS, generator=gen)).to(torch.float32)
        sd[f"model.layers.{l}.self_attn.logn_scale"] = sc
        scales.append(sc.to(TORCH64))
    jc = dict(base_cfg_json)
    jc["dtype"] = "float32"
    jc["attention_variant"] = "logn"
    jc["logn"] = {"scale": 1.0}
    jcfg = write_variant_dir(name, sd, jc)

    def logn_rule(scores, layer_idx):
        Tq = scores.shape[-2]
        n_i = torch.arange(1, Tq + 1, dtype=TORCH64).view(1, 1, Tq, 1)
        return scores * scales[layer_idx].view(1, HEADS, 1, 1) * torch.log(n_i)

    sd64 = transformers_check(name, LlamaForCausalLM, vcfg, sd, jcfg, "logn", logn_rule)
    logits, caps = own_forward(sd64, jcfg, ids, "logn")
    M, margin = write_reference(
        name, "logn", ids, logits, caps,
        logit_fn=lambda l, h, i, j, s_: s_ * float(scales[l][h]) * math.log(i + 1),
    )
    sc_all = torch.cat(scales)
    summary.append((name, peak_stats(caps), margin, M,
                    f" logn_scale range [{sc_all.min().item():.3f}, {sc_all.max().item():.3f}];"))

    os.remove(tok_json)

    # ---------------------------------------------------------------- corpus
    write_corpus(tok, bos, eos)

    for sub in (MODELS, REFS, CORPUS):  # save_pretrained / safetensors create files 0600
        for dp, _, fns in os.walk(sub):
            for fn in fns:
                os.chmod(os.path.join(dp, fn), 0o644)

    # ---------------------------------------------------------------- report
    print("\nself-checks:")
    for c in checks:
        print("  " + c)
    print("\nfixtures:")
    for row in summary:
        name, peak, margin, M = row[:4]
        info = row[4] if len(row) > 4 else ""
        assert peak > 0.3, (name, peak)
        assert margin > 1e-3, (name, "sink importance too close to threshold", margin)
        print(f"  {name}: peaked rows (i>=3, max p>0.3) {peak:.3f}; sink_rate {M['sink_rate']['rate']:.3f} "
              f"(min |importance-0.3| {margin:.3f}); nll {M['nll']['mean']:.4f}; "
              f"weight_sum mean {M['weight_sum']['mean']};{info}")
    total = 0
    for sub in (MODELS, REFS, CORPUS):
        n = 0
        for dp, _, fns in os.walk(sub):
            for fn in fns:
                n += os.path.getsize(os.path.join(dp, fn))
        print(f"  {os.path.relpath(sub, ROOT)}: {n} bytes")
        total += n
    print(f"written by this script: {total} bytes")
    assert total < 11_500_000


CORPUS_DOCS = [
    "The quick brown fox jumps over the lazy dog.",
    "Attention maps show where each token looks. The first token often collects a lot of weight.",
    "A small model can still teach us something, if we measure it with care.",
    "Rain fell on the town all night, and in the morning the streets were clean.",
    "She opened the book, read one page, and then closed it again.",
    "Gated attention multiplies the output of each head by a learned gate.",
    "The sink takes the mass that no token wants.",
    "We pack short documents into windows of equal length, with an end token between them.",
]


def write_corpus(tok, bos, eos):
    with open(os.path.join(CORPUS, "tiny.jsonl"), "w") as f:
        for i, doc in enumerate(CORPUS_DOCS):
            f.write(json.dumps({"id": i, "text": doc}) + "\n")
    txt = (
        "Once upon a time there was a small model.\n"
        "It read the text one token at a time, and it looked back at the first token a lot.\n"
        "\n"
        "Then it learned to look at the tokens that mattered.\n"
    )
    with open(os.path.join(CORPUS, "tiny.txt"), "w") as f:
        f.write(txt)
    g = np.random.default_rng(42)
    write_json(os.path.join(CORPUS, "tiny_ids.json"), [[int(x) for x in g.integers(0, VOCAB, 12)] for _ in range(3)], indent=None)

    unk = tok.token_to_id("<unk>")
    stream = []
    for i, doc in enumerate(CORPUS_DOCS):
        e = tok.encode(doc, add_special_tokens=False).ids
        assert unk not in e, doc
        if i > 0:
            stream.append(eos)
        stream.extend(e)
    L, N = 16, 3
    assert len(stream) >= N * L
    always = [[bos] + stream[w * (L - 1):(w + 1) * (L - 1)] for w in range(N)]
    never = [stream[w * L:(w + 1) * L] for w in range(N)]
    packed = {
        "always": {"seq_len": L, "num_seqs": N, "bos": "always", "windows": always},
        "never": {"seq_len": L, "num_seqs": N, "bos": "never", "windows": never},
    }
    write_json(os.path.join(CORPUS, "tiny.packed.json"), packed)
    # extra: tiny.txt encoded as a single string (no special tokens) and the full jsonl stream
    write_json(
        os.path.join(CORPUS, "tiny.encoded.json"),
        {
            "jsonl_stream": stream,
            "jsonl_docs": [tok.encode(d, add_special_tokens=False).ids for d in CORPUS_DOCS],
            "txt_whole": tok.encode(txt, add_special_tokens=False).ids,
        },
        indent=None,
    )
    print(f"corpus: jsonl stream {len(stream)} ids ({len(CORPUS_DOCS)} docs)")


if __name__ == "__main__":
    sys.exit(main())
