#!/usr/bin/env python3
"""Tiny checkpoints and float64 references for two Mamba-2 hybrid families: IBM Granite 4
(granitemoehybrid: Mamba-2 layers and softmax-attention layers, MoE + shared MLP, muP
multipliers) and Falcon-H1 (falcon_h1: attention and Mamba-2 in parallel in every layer, with
Falcon-H1's multipliers).

Writes, relative to the repository root (the parent of this file's folder), for each <name>
below and nothing else, the model folder and the reference files that fixture_common.py lists,
by the hybrid convention below: <name>.safetensors holds pattern, q, k, attn_scores for the
SOFTMAX-ATTENTION layers only; <name>.metrics.json adds "attention_layers", the 1-based decoder
layers that layers.{a} / every per-layer array stand for; <name>.logit_key.json is written by
make_logit_key_fixtures.py at the end, with both names added in memory to its SUM_TO_ONE set,
for the names it accepts: falcon_h1 (it refuses granitemoehybrid, whose attn_scores are q.k x
attention_multiplier, not q.k / sqrt(d), and the reason is printed).

Hybrid convention: only softmax-attention layers are captured. layers.{a}.* in the safetensors
and every per-layer array of metrics.json run over the attention layers in order (a = 0, 1, ...);
metrics.json "attention_layers" maps a to the decoder layer (1-based).

Fixtures (hidden 32, vocab 64, rms_norm_eps 1e-5, bos/eos of make_fixtures.common_cfg, GQA 4/2
heads of head_dim 8; every matrix N(0, 0.2), RMSNorm weights (incl. the Mamba gated norm)
1 + 0.1 N, conv1d biases N(0, 0.2^2); per Mamba layer at decoder layer l (0-based) and head h:
A_log = ln(A_BASE)[(h - l) mod 4], dt_bias = DT_BIAS[(h - l) mod 4], D = D_SKIP[(h - l) mod 4]
(torch.roll by l) with A_BASE [0.1, 0.4, 1.0, 2.5] (A = -A_BASE), DT_BIAS [-1.5, -0.5, 0.0, 0.5],
D_SKIP [1.0, 0.5, -0.3, 1.5]; Mamba: 4 heads of 8 (d_inner 32), d_state 8, 2 groups (heads 0-1
read group 0's B / C, heads 2-3 group 1's), d_conv 4, chunk_size 8 (T = 20: 3 chunks, the last
padded by 4), time_step_limit (0, inf) (the class default: no clamp)):

  granitemoehybrid  GraniteMoeHybridForCausalLM, 4 layers, layer_types [mamba, attention, mamba,
                    attention] (saved as linear_attention / full_attention), attention at decoder
                    layers 2 and 4; position_embedding_type None (the class default: NoPE, no
                    rotary embedding at all); mamba_expand 1 (d_inner = 1 x 32), mamba_conv_bias
                    true / mamba_proj_bias false (class defaults), gated RMSNorm in groups of 16
                    (d_inner / n_groups); MoE in every layer: 4 experts of 16, top-2, softmax over
                    the 2 chosen router logits, plus the shared MLP (shared_intermediate_size 16);
                    muP: embedding_multiplier 2.7, residual_multiplier 0.5, attention_multiplier
                    0.45 (the softmax scale instead of 8^-1/2), logits_scaling 2.5 (logits
                    divided); untied lm_head (class default); init seed 2601
  falcon_h1         FalconH1ForCausalLM, 3 layers, each attention + Mamba-2 in parallel on the
                    same normed input, SwiGLU MLP of 64; mamba_d_ssm 32 (overrides mamba_expand 2),
                    mamba_rms_norm false / mamba_norm_before_gate true (class defaults: the scan
                    output is gated by silu(z), no norm), RoPE theta 1e4 (class default), untied;
                    multipliers: embedding 1.7, lm_head 0.7, attention_in 1.3, attention_out 0.9,
                    ssm_in 1.1, ssm_out 0.6, key 1.9, mlp [gate 0.85, down 1.15], ssm (mup vector
                    over the in_proj output [z, x, B, C, dt]) [0.8, 1.2, 1.4, 0.55, 1.6];
                    init seed 2701

Reference: transformers itself, eager, model.double(), with precision-only patches (the same
math, float64): RMSNorm, Granite's gated RMSNorm (its float32 casts), RoPE cos/sin and inv_freq,
the eager softmax, the Mamba mixer's A = -exp(A_log.float()) and every .float() of the chunked
scan (mamba2_chunk_scan: x, B, C, dt, dt x A), and Falcon-H1's mup_vector (a float32 buffer built
at init) rebuilt in float64 from the config. Kept as transformers does it: Granite's router
(logits cast to float32, top-2 and the softmax of the 2 in float32), as for every MoE fixture.
transformers takes its pure-torch Mamba path: mamba_ssm, causal_conv1d and kernels are not
installed (checked), eval mode and no cache (the chunked scan, not the fused kernel or the
one-token update). q and k are what the eager attention multiplies (Falcon-H1: k x key_multiplier,
after RoPE); attn_scores the scaled logits its softmax sees (Granite: q.k x attention_multiplier).

Checks (printed): the unpatched transformers forward agrees (logits < 1e-4: the model in float64
with transformers' float32 internals, and the whole model in float32); the MoE routing of every
token re-derived in float64 with a clear margin; every Mamba layer re-implemented independently in
numpy float64 as the plain recurrence (h_t = exp(dt A) h_{t-1} + dt x_t B_t^T per head,
y_t = C_t h_t + D x_t, gate / gated RMSNorm, out_proj) from the captured layer input, against
transformers' chunked scan (< 1e-10); the attention q / k re-derived from the captured attention
input (Falcon-H1: the attention reads the Mamba input x attention_in_multiplier); an independent
numpy float64 forward of the whole model (embedding to logits, every multiplier) against the
reference logits; every metric re-derived with Python loops.

Deterministic (fixed seeds; a rerun writes the same bytes), a few seconds on one CPU core.

Run:  /tmp/asa-py-venv/bin/python tools/make_mamba2_fixtures.py
"""

import importlib.util
import inspect
import json
import math
import os
import sys

import numpy as np
import torch
from safetensors import safe_open

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402  (the shared float64 transformers reference)
from make_fixtures import HEAD_DIM, HEADS, HIDDEN, KV_HEADS, TORCH64  # noqa: E402
import make_logit_key_fixtures as lk  # noqa: E402
import fixture_common as fc  # noqa: E402  (helpers shared by the float64 fixture scripts)

from transformers import FalconH1Config, FalconH1ForCausalLM, GraniteMoeHybridConfig, GraniteMoeHybridForCausalLM  # noqa: E402
from transformers.models.falcon_h1 import modeling_falcon_h1  # noqa: E402
from transformers.models.granitemoehybrid import modeling_granitemoehybrid  # noqa: E402

NAMES = ["granitemoehybrid", "falcon_h1"]
MOE_INTER = 16
ROUTE_MARGIN = 1e-4  # every routing decision clear of its runner-up by at least this
MAMBA_TOL = 1e-10  # the recurrence vs transformers' chunked scan
# the Mamba-2 mixer of both fixtures
MAMBA = dict(mamba_n_heads=4, mamba_d_head=8, mamba_d_state=8, mamba_n_groups=2, mamba_d_conv=4, mamba_chunk_size=8)
D_INNER = 32
A_BASE = [0.1, 0.4, 1.0, 2.5]  # A = -A_BASE (A_log = ln A_BASE), rolled by the layer index
DT_BIAS = [-1.5, -0.5, 0.0, 0.5]
D_SKIP = [1.0, 0.5, -0.3, 1.5]
CONV_BIAS_STD = 0.2
GRANITE_MUP = dict(embedding_multiplier=2.7, residual_multiplier=0.5, attention_multiplier=0.45, logits_scaling=2.5)
FALCON_MUP = dict(
    embedding_multiplier=1.7,
    lm_head_multiplier=0.7,
    attention_in_multiplier=1.3,
    attention_out_multiplier=0.9,
    ssm_in_multiplier=1.1,
    ssm_out_multiplier=0.6,
    key_multiplier=1.9,
    mlp_multipliers=[0.85, 1.15],
    ssm_multipliers=[0.8, 1.2, 1.4, 0.55, 1.6],
)


# ----------------------------------------------------------------------------
# Reading the saved checkpoints
# ----------------------------------------------------------------------------
def float_tags(obj):
    """transformers 5 writes a non-finite float in config.json as {"__float__": "Infinity"}."""
    if set(obj) == {"__float__"}:
        return {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}[obj["__float__"]]
    return obj


def load_np(d):
    """The saved checkpoint as float64 numpy arrays, and its config.json."""
    with safe_open(os.path.join(d, "model.safetensors"), framework="pt") as f:
        sd = {k: f.get_tensor(k).to(TORCH64).numpy() for k in f.keys()}
    with open(os.path.join(d, "config.json")) as f:
        return sd, json.load(f, object_hook=float_tags)


# ----------------------------------------------------------------------------
# float64 patches of the Mamba-2 path (precision only, the same math)
# ----------------------------------------------------------------------------
def mamba_float64_patches(mod, mixer_cls, gated_cls=None):
    """(obj, attr, value) triples: the mixer's forward without A_log.float(), the chunked scan
    without its five .float() casts (x, B, C, dt, dt x A), the gated RMSNorm without its float32
    casts. Returns (triples, scan_calls): scan_calls records each chunked scan's output."""
    scan64 = fc.from_source(mod.mamba2_chunk_scan, [(".float()", "", 5)])
    scan_calls = []

    def scan(*args, **kwargs):
        out = scan64(*args, **kwargs)
        scan_calls.append(out.detach().clone())
        return out

    triples = [
        (mixer_cls, "forward", fc.from_source(mixer_cls.forward, [("-torch.exp(self.A_log.float())", "-torch.exp(self.A_log)")])),
        (mod, "mamba2_chunk_scan", scan),
    ]
    if gated_cls is not None:
        triples.append((gated_cls, "forward", fc.from_source(gated_cls.forward, [("torch.float32", "input_dtype", 2)])))
    return triples, scan_calls


def pure_torch_path():
    """transformers' Mamba-2 helpers resolve to their torch bodies in both modules: mamba_ssm,
    causal_conv1d and kernels are not importable, and each wrapper's `is_new_implementation` is
    False. Returns a line for the log."""
    for pkg in ("mamba_ssm", "causal_conv1d", "kernels"):
        assert importlib.util.find_spec(pkg) is None, f"{pkg} is installed: transformers would use its kernels"
    names = ("causal_conv1d_fn", "causal_conv1d_update", "mamba2_chunk_scan", "mamba2_selective_state_update",
             "mamba2_split_conv1d_scan_combined")
    for mod in (modeling_granitemoehybrid, modeling_falcon_h1):
        for n in names:
            nl = inspect.getclosurevars(getattr(mod, n)).nonlocals
            assert nl["is_new_implementation"] is False, (mod.__name__, n)
    return (f"pure-torch Mamba path: mamba_ssm, causal_conv1d, kernels not installed; {', '.join(names)} "
            f"resolve to transformers' torch bodies in both modules")


# ----------------------------------------------------------------------------
# transformers in float64, hybrid: only the softmax-attention layers are captured
# ----------------------------------------------------------------------------
def hybrid64_reference(model_dir, cls, mod, ids, rms_cls, mixer_cls, gated_cls=None, extra=None, fix=None):
    """transformers itself in float64 (eager, output_attentions) with RMSNorm, RoPE, the eager
    softmax and the Mamba-2 path patched to keep float64 (make_fixtures.transformers64_reference's
    attention capture, over the attention layers only). fix(model) adjusts the loaded model
    (Falcon-H1: the float64 mup_vector). Returns (model, logits, caps, attention layer indices
    (0-based), mixer calls (module, input, output), scan outputs, attention calls (module,
    input))."""
    extra = extra or {}
    model = cls.from_pretrained(model_dir, attn_implementation="eager", dtype=torch.float32, **extra)
    model = model.double().eval()
    if fix is not None:
        fix(model)
    rotary = fc.float64_rope(model)
    caps, order = [], []
    mamba_triples, scan_calls = mamba_float64_patches(mod, mixer_cls, gated_cls)
    triples = [(mod, "eager_attention_forward", fc.eager_capture(mod, caps, order)),
               (rms_cls, "forward", mf._rms_forward64), *mamba_triples]
    if rotary is not None:
        triples.append((type(rotary), "forward", mf._rope_forward64))
    attn_cls = type(next(m for m in model.modules() if type(m).__name__.endswith("Attention")))
    with fc.patched(*triples), fc.recording(
        mixer_cls, lambda m, a, kw, o: (m, kw["hidden_states"].detach().clone(), kw.get("attention_mask"), o.detach().clone())
    ) as mixer_calls, fc.recording(
        attn_cls, lambda m, a, kw, o: (m, kw["hidden_states"].detach().clone())
    ) as attn_calls, torch.no_grad():
        out = model(input_ids=ids, output_attentions=True, use_cache=False)
    attn_layers = [i for i, layer in enumerate(model.model.layers) if getattr(layer, "self_attn", None) is not None]
    assert order == attn_layers and len(caps) == len(out.attentions) == len(attn_layers), (order, attn_layers)
    assert [c[0].layer_idx for c in mixer_calls] == [i for i, layer in enumerate(model.model.layers)
                                                     if getattr(layer, "mamba", None) is not None]
    assert len(scan_calls) == len(mixer_calls) and all(c[2] is None for c in mixer_calls)
    fc.add_patterns(caps, out)
    return model, out.logits.detach(), caps, attn_layers, mixer_calls, scan_calls, attn_calls


def unpatched_forwards(model_dir, cls, mod, ids, extra=None):
    """transformers as it is: (a) the checkpoint in float64 with transformers' float32 internals
    (make_fixtures' check), (b) the whole model in float32. Counts the calls of its (torch)
    chunked scan and causal conv to show the path taken."""
    extra = extra or {}
    counts = {"mamba2_chunk_scan": 0, "causal_conv1d_fn": 0}

    def counting(name):
        inner = getattr(mod, name)

        def f(*a, **kw):
            counts[name] += 1
            return inner(*a, **kw)

        return f

    outs = []
    with fc.patched(*[(mod, n, counting(n)) for n in counts]), torch.no_grad():
        for to64 in (True, False):
            m = cls.from_pretrained(model_dir, attn_implementation="eager", dtype=torch.float32, **extra).eval()
            if to64:
                m = m.double()
            outs.append(m(input_ids=ids, use_cache=False).logits.to(TORCH64))
    return outs, counts


# ----------------------------------------------------------------------------
# Independent numpy float64 implementations
# ----------------------------------------------------------------------------
def mamba2_recurrent(x, p, c):
    """A Mamba-2 mixer as the plain recurrence, from the layer's weights p (names without
    'model.layers.{l}.mamba.') and settings c. x [B, T, hidden] -> (out [B, T, hidden], the
    scan output y [B, T, H, P] before the gate, dt [B, T, H])."""
    Bn, Tn, _ = x.shape
    H, P, N, G, K, DI = c["heads"], c["head_dim"], c["d_state"], c["groups"], c["d_conv"], c["d_inner"]
    conv_dim = DI + 2 * G * N
    x = x * c["ssm_in"]
    zxbcdt = x @ p["in_proj.weight"].T
    if "in_proj.bias" in p:
        zxbcdt = zxbcdt + p["in_proj.bias"]
    zxbcdt = zxbcdt * c["mup"]  # [2 DI + 2 G N + H]: per segment z, x, B, C, dt
    assert zxbcdt.shape[-1] == DI + conv_dim + H
    z, xbc, dt = zxbcdt[..., :DI], zxbcdt[..., DI:DI + conv_dim], zxbcdt[..., DI + conv_dim:]
    w = p["conv1d.weight"][:, 0, :]  # [conv_dim, K]: out[t] = sum_k w[:, k] xbc[t - (K - 1) + k]
    conv = np.zeros_like(xbc)
    for t in range(Tn):
        for k in range(K):
            s = t - (K - 1) + k
            if s >= 0:
                conv[:, t] += w[:, k] * xbc[:, s]
    if "conv1d.bias" in p:
        conv = conv + p["conv1d.bias"]
    xbc = fc.np_silu(conv)
    xs = xbc[..., :DI].reshape(Bn, Tn, H, P)
    Bm = xbc[..., DI:DI + G * N].reshape(Bn, Tn, G, N)
    Cm = xbc[..., DI + G * N:].reshape(Bn, Tn, G, N)
    dt = np.clip(fc.np_softplus(dt + p["dt_bias"]), c["dt_limit"][0], c["dt_limit"][1])
    A = -np.exp(p["A_log"])
    y = np.zeros((Bn, Tn, H, P))
    for b in range(Bn):
        for h in range(H):
            g = h // (H // G)
            S = np.zeros((P, N))
            for t in range(Tn):
                S = math.exp(dt[b, t, h] * A[h]) * S + dt[b, t, h] * np.outer(xs[b, t, h], Bm[b, t, g])
                y[b, t, h] = S @ Cm[b, t, g] + p["D"][h] * xs[b, t, h]
    yy = y.reshape(Bn, Tn, DI)
    if c["gated_norm"] == "gate_then_norm":  # Granite: y silu(z), RMSNorm per group of DI / G, x w
        yy = yy * fc.np_silu(z)
        yg = yy.reshape(Bn, Tn, G, DI // G)
        yg = yg / np.sqrt((yg * yg).mean(-1, keepdims=True) + c["eps"])
        yy = yg.reshape(Bn, Tn, DI) * p["norm.weight"]
    elif c["gated_norm"] is None:  # Falcon-H1 with mamba_rms_norm false: y silu(z)
        yy = yy * fc.np_silu(z)
    else:
        raise NotImplementedError(c["gated_norm"])
    out = yy @ p["out_proj.weight"].T
    if "out_proj.bias" in p:
        out = out + p["out_proj.bias"]
    return out, y, dt


def mamba_settings(cfg, mup, ssm_in, gated_norm):
    return {"heads": cfg["mamba_n_heads"], "head_dim": cfg["mamba_d_head"], "d_state": cfg["mamba_d_state"],
            "groups": cfg["mamba_n_groups"], "d_conv": cfg["mamba_d_conv"], "d_inner": D_INNER,
            "dt_limit": tuple(cfg["time_step_limit"]), "eps": cfg["rms_norm_eps"], "mup": mup, "ssm_in": ssm_in,
            "gated_norm": gated_norm}


def falcon_mup(cfg):
    """Falcon-H1's mup vector in float64: ssm_multipliers over the in_proj output segments
    [z (d_inner), x (d_inner), B (G N), C (G N), dt (heads)]."""
    DI, GN, H = D_INNER, cfg["mamba_n_groups"] * cfg["mamba_d_state"], cfg["mamba_n_heads"]
    m = cfg["ssm_multipliers"]
    return np.concatenate([np.full(DI, m[0]), np.full(DI, m[1]), np.full(GN, m[2]), np.full(GN, m[3]), np.full(H, m[4])])


def layer_params(sd, prefix):
    return {k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)}


def attention_np(x, p, cfg, scale, key_mult=1.0, rope_theta=None):
    """GQA softmax attention, causal, from the layer's self_attn weights. q, k after RoPE
    (half-split, theta rope_theta; None: NoPE); k x key_mult."""
    Bn, Tn, _ = x.shape
    H, KV, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], HEAD_DIM
    q = (x @ p["q_proj.weight"].T).reshape(Bn, Tn, H, D).transpose(0, 2, 1, 3)
    k = (x @ p["k_proj.weight"].T).reshape(Bn, Tn, KV, D).transpose(0, 2, 1, 3) * key_mult
    v = (x @ p["v_proj.weight"].T).reshape(Bn, Tn, KV, D).transpose(0, 2, 1, 3)
    if rope_theta is not None:
        pos = np.arange(Tn, dtype=np.float64)
        q, k = fc.np_rope_half(q, pos, rope_theta, D), fc.np_rope_half(k, pos, rope_theta, D)
    return fc.np_attention(q, k, v, scale) @ p["o_proj.weight"].T, q, k


def granite_forward_np(d, ids, router64=False):
    """GraniteMoeHybrid from the saved files, numpy float64 (the router as transformers: float32
    top-2 and softmax, via torch; router64: all in float64 instead)."""
    sd, cfg = load_np(d)
    eps = cfg["rms_norm_eps"]
    h = sd["model.embed_tokens.weight"][ids.numpy()] * cfg["embedding_multiplier"]
    c = mamba_settings(cfg, 1.0, 1.0, "gate_then_norm")
    E, K = cfg["num_local_experts"], cfg["num_experts_per_tok"]
    assert cfg["position_embedding_type"] is None
    for l, kind in enumerate(cfg["layer_types"]):
        p = layer_params(sd, f"model.layers.{l}.")
        n = fc.np_rms(h, p["input_layernorm.weight"], eps)
        if kind == "linear_attention":
            o = mamba2_recurrent(n, layer_params(p, "mamba."), c)[0]
        else:
            assert kind == "full_attention", kind
            o = attention_np(n, layer_params(p, "self_attn."), cfg, cfg["attention_multiplier"])[0]
        h = h + o * cfg["residual_multiplier"]
        n = fc.np_rms(h, p["post_attention_layernorm.weight"], eps)
        flat = n.reshape(-1, n.shape[-1])
        logits32 = torch.from_numpy(flat @ p["block_sparse_moe.router.layer.weight"].T)
        if not router64:
            logits32 = logits32.float()
        top_v, top_i = logits32.topk(K, dim=-1)
        top_w = torch.softmax(top_v, dim=-1).to(TORCH64).numpy()
        gu, dn = p["block_sparse_moe.input_linear.weight"], p["block_sparse_moe.output_linear.weight"]
        I = gu.shape[1] // 2
        moe = np.zeros_like(flat)
        for tok in range(flat.shape[0]):
            for j in range(K):
                e = int(top_i[tok, j])
                assert 0 <= e < E
                gate, up = flat[tok] @ gu[e, :I].T, flat[tok] @ gu[e, I:].T
                moe[tok] += ((fc.np_silu(gate) * up) @ dn[e].T) * top_w[tok, j]
        S = p["shared_mlp.input_linear.weight"].shape[0] // 2
        hs = flat @ p["shared_mlp.input_linear.weight"].T
        shared = (fc.np_silu(hs[:, :S]) * hs[:, S:]) @ p["shared_mlp.output_linear.weight"].T
        h = h + (moe + shared).reshape(h.shape) * cfg["residual_multiplier"]
    h = fc.np_rms(h, sd["model.norm.weight"], eps)
    return (h @ sd["lm_head.weight"].T) / cfg["logits_scaling"]


def falcon_forward_np(d, ids):
    """FalconH1 from the saved files, numpy float64."""
    sd, cfg = load_np(d)
    eps = cfg["rms_norm_eps"]
    h = sd["model.embed_tokens.weight"][ids.numpy()] * cfg["embedding_multiplier"]
    c = mamba_settings(cfg, falcon_mup(cfg), cfg["ssm_in_multiplier"], None)
    gm, dm = cfg["mlp_multipliers"]
    for l in range(cfg["num_hidden_layers"]):
        p = layer_params(sd, f"model.layers.{l}.")
        n = fc.np_rms(h, p["input_layernorm.weight"], eps)
        m = mamba2_recurrent(n, layer_params(p, "mamba."), c)[0] * cfg["ssm_out_multiplier"]
        a = attention_np(n * cfg["attention_in_multiplier"], layer_params(p, "self_attn."), cfg, HEAD_DIM ** -0.5,
                         key_mult=cfg["key_multiplier"], rope_theta=cfg["rope_parameters"]["rope_theta"])[0]
        h = h + (m + a * cfg["attention_out_multiplier"])
        n = fc.np_rms(h, p["pre_ff_layernorm.weight"], eps)
        y = (n @ p["feed_forward.up_proj.weight"].T) * fc.np_silu((n @ p["feed_forward.gate_proj.weight"].T) * gm)
        h = h + (y @ p["feed_forward.down_proj.weight"].T) * dm
    h = fc.np_rms(h, sd["model.final_layernorm.weight"], eps)
    return (h @ sd["lm_head.weight"].T) * cfg["lm_head_multiplier"]


# ----------------------------------------------------------------------------
# Checks against what transformers did
# ----------------------------------------------------------------------------
def mamba_check(d, mixer_calls, scan_calls, c):
    """Each Mamba layer's captured input through mamba2_recurrent vs transformers' chunked-scan
    output (before the gate) and the mixer output. Returns (worst scan diff, worst output diff,
    dt range, exp(dt A) range, largest |out|)."""
    sd, _ = load_np(d)
    ds, do, dts, decays, big = 0.0, 0.0, [], [], 0.0
    for (module, x, _, out), scan in zip(mixer_calls, scan_calls):
        p = layer_params(sd, f"model.layers.{module.layer_idx}.mamba.")
        mine, y, dt = mamba2_recurrent(x.numpy(), p, c)
        ds = max(ds, np.abs(y - scan.numpy()).max())
        do = max(do, np.abs(mine - out.numpy()).max())
        big = max(big, np.abs(out.numpy()).max())
        dts.append(dt)
        decays.append(np.exp(dt * -np.exp(p["A_log"])))
    dts, decays = np.concatenate([x.ravel() for x in dts]), np.concatenate([x.ravel() for x in decays])
    return ds, do, np.quantile(dts, [0, 0.05, 0.5, 0.95, 1]), np.quantile(decays, [0, 0.05, 0.5, 0.95, 1]), big


def spread(q):
    return f"[{q[0]:.3f}, {q[-1]:.3f}] (5/50/95%: {q[1]:.3f} / {q[2]:.3f} / {q[3]:.3f})"


def granite_routing_check(calls, k):
    """Granite's router re-derived in float64: logits x W^T, the top k, softmax over those k.
    Returns (largest weight difference to transformers' float32 weights, smallest margin
    between the k-th and the next logit, tokens x layers)."""
    dw, margin, n = 0.0, float("inf"), 0
    for router, x, (_, w32, idx32) in calls:
        logits = fc.router_logits64(router, x)
        margin = min(margin, fc.topk_margin(logits, k))
        top = logits.topk(k, dim=-1)
        assert torch.equal(top.indices, idx32), "float64 routing chose other experts (or another order)"
        w = torch.softmax(top.values, dim=-1)
        dw = max(dw, (w - w32.to(TORCH64)).abs().max().item())
        n += logits.shape[0]
    return dw, margin, n


def qk_check(attn_calls, caps, key_mult=1.0, rope_theta=None):
    """q and k of every attention layer re-derived (numpy) from the attention's input."""
    worst = 0.0
    for (module, x), cap in zip(attn_calls, caps):
        p = {"q_proj.weight": module.q_proj.weight.detach().numpy(), "k_proj.weight": module.k_proj.weight.detach().numpy(),
             "v_proj.weight": module.v_proj.weight.detach().numpy(), "o_proj.weight": module.o_proj.weight.detach().numpy()}
        cfg = {"num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS}
        _, q, k = attention_np(x.numpy(), p, cfg, 1.0, key_mult=key_mult, rope_theta=rope_theta)
        worst = max(worst, np.abs(q - cap["q"].numpy()).max(), np.abs(k - cap["k"].numpy()).max())
    return worst


def set_mamba_params(model):
    """A_log, dt_bias, D of every Mamba layer: the base values rolled by the layer index."""
    with torch.no_grad():
        for l, layer in enumerate(model.model.layers):
            m = getattr(layer, "mamba", None)
            if m is None:
                continue
            m.A_log.copy_(torch.roll(torch.log(torch.tensor(A_BASE, dtype=TORCH64)), l).float())
            m.dt_bias.copy_(torch.roll(torch.tensor(DT_BIAS), l))
            m.D.copy_(torch.roll(torch.tensor(D_SKIP), l))


# ----------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------
def main():
    tmp, tok_json, ids, cc = fc.start(NAMES)
    checks, summary = [pure_torch_path()], []

    def finish(name, d, cls, mod, logits, caps, attn_layers, n_mamba, extra=None, logit_fn=None, info=""):
        (lg64, lg32), counts = unpatched_forwards(d, cls, mod, ids, extra)
        d64, d32 = (lg64 - logits).abs().max().item(), (lg32 - logits).abs().max().item()
        assert d64 < 1e-4 and d32 < 1e-4, (d64, d32)
        assert counts == {"mamba2_chunk_scan": 2 * n_mamba, "causal_conv1d_fn": 2 * n_mamba}, counts
        checks.append(f"{name}: transformers float64-patched vs unpatched logits: model in float64 with transformers' "
                      f"float32 internals {mf.fmt(d64)}, whole model in float32 {mf.fmt(d32)} (each unpatched pass ran "
                      f"the torch chunked scan and causal conv once per Mamba layer)")
        M, margin = mf.write_reference(name, "softmax", ids, logits, caps, logit_fn=logit_fn)
        M, line = fc.hybrid_metrics(name, M, [a + 1 for a in attn_layers], logit_fn)  # metrics.json's "attention_layers"
        checks.append(line)
        summary.append((name, mf.peak_stats(caps), margin, M, info, d64))

    # ---------------------------------------------------------------- granitemoehybrid
    # Granite 4 (H): Mamba-2 layers 1, 3 and NoPE softmax-attention layers 2, 4; MoE (top-2 of 4,
    # softmax over the chosen logits) + shared MLP in every layer; muP multipliers.
    name = "granitemoehybrid"
    cfg = GraniteMoeHybridConfig(
        **{**cc, "num_hidden_layers": 4, "intermediate_size": MOE_INTER},
        layer_types=["mamba", "attention", "mamba", "attention"],
        num_local_experts=4,
        num_experts_per_tok=2,
        shared_intermediate_size=16,
        mamba_expand=1,
        **MAMBA,
        **GRANITE_MUP,
    )
    assert cfg.layer_types == ["linear_attention", "full_attention"] * 2, cfg.layer_types
    assert cfg.position_embedding_type is None and cfg.time_step_limit == (0.0, float("inf"))
    assert cfg.mamba_conv_bias is True and cfg.mamba_proj_bias is False and cfg.tie_word_embeddings is False
    torch.manual_seed(26)
    model = GraniteMoeHybridForCausalLM(cfg)
    assert model.model.rotary_emb is None
    mf.init_weights(model, seed=2601, bias_std=CONV_BIAS_STD)
    set_mamba_params(model)
    d, saved, keys = fc.save_model(name, model, tok_json, object_hook=float_tags)
    assert saved["model_type"] == "granitemoehybrid" and saved["layer_types"] == cfg.layer_types, saved
    assert "lm_head.weight" in keys and "model.layers.0.mamba.in_proj.bias" not in keys
    want = {"model.layers.0.mamba.in_proj.weight": (D_INNER + (D_INNER + 2 * 2 * 8) + 4, HIDDEN),
            "model.layers.0.mamba.conv1d.weight": (D_INNER + 2 * 2 * 8, 1, 4),
            "model.layers.0.mamba.conv1d.bias": (D_INNER + 2 * 2 * 8,),
            "model.layers.0.mamba.norm.weight": (D_INNER,), "model.layers.0.mamba.out_proj.weight": (HIDDEN, D_INNER),
            "model.layers.0.mamba.A_log": (4,), "model.layers.0.mamba.dt_bias": (4,), "model.layers.0.mamba.D": (4,),
            "model.layers.1.self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
            # saved under the hub's names (transformers' granitemoe conversion mapping renames
            # router.weight / experts.gate_up_proj / experts.down_proj on save and load)
            "model.layers.1.block_sparse_moe.router.layer.weight": (4, HIDDEN),
            "model.layers.1.block_sparse_moe.input_linear.weight": (4, 2 * MOE_INTER, HIDDEN),
            "model.layers.1.block_sparse_moe.output_linear.weight": (4, HIDDEN, MOE_INTER),
            "model.layers.1.shared_mlp.input_linear.weight": (2 * 16, HIDDEN),
            "model.layers.1.shared_mlp.output_linear.weight": (HIDDEN, 16)}
    for k, shape in want.items():
        assert keys.get(k) == shape, (k, keys.get(k))
    assert "model.layers.0.self_attn.q_proj.weight" not in keys and "model.layers.1.mamba.A_log" not in keys
    with fc.recording(modeling_granitemoehybrid.GraniteMoeHybridTopKRouter,
                   lambda m, a, kw, o: (m, a[0].detach().clone(), tuple(t.detach().clone() for t in o))) as calls:
        model64, logits, caps, attn_layers, mixer_calls, scan_calls, attn_calls = hybrid64_reference(
            d, GraniteMoeHybridForCausalLM, modeling_granitemoehybrid, ids,
            rms_cls=modeling_granitemoehybrid.GraniteMoeHybridRMSNorm,
            mixer_cls=modeling_granitemoehybrid.GraniteMoeHybridMambaLayer,
            gated_cls=modeling_granitemoehybrid.GraniteMoeHybridRMSNormGated,
            extra={"experts_implementation": "eager"},
        )
    assert attn_layers == [1, 3], attn_layers
    assert abs(model64.model.layers[1].self_attn.scaling - 0.45) == 0.0
    ms, mo, dtr, decr, big = mamba_check(d, mixer_calls, scan_calls, mamba_settings(saved, 1.0, 1.0, "gate_then_norm"))
    assert ms < MAMBA_TOL and mo < MAMBA_TOL, (ms, mo)
    checks.append(f"{name}: Mamba layers 1, 3 as the plain recurrence (numpy float64, gated RMSNorm in 2 groups) vs "
                  f"transformers' chunked scan (chunk 8, T 20): scan output {mf.fmt(ms)}, mixer output {mf.fmt(mo)} "
                  f"(|out| <= {big:.2f}); dt in {spread(dtr)}, exp(dt A) in {spread(decr)}")
    dw, rm, n = granite_routing_check(calls, 2)
    assert len(calls) == 4 and rm > ROUTE_MARGIN and dw < 1e-6, (len(calls), dw, rm)
    checks.append(f"{name}: routing re-derived in float64: same experts (same order) for all {n} token-layers, "
                  f"smallest top-2 margin {rm:.4f}, softmax weights vs transformers' float32 {mf.fmt(dw)}")
    dq = qk_check(attn_calls, caps)
    assert dq < 1e-13, dq
    checks.append(f"{name}: NoPE q, k == q_proj(x), k_proj(x) of the attention input (layers 2, 4): {mf.fmt(dq)}; "
                  f"attn_scores = q.k x attention_multiplier 0.45")
    dl = np.abs(granite_forward_np(d, ids) - logits.numpy()).max()
    assert dl < 1e-12, dl
    dr = np.abs(granite_forward_np(d, ids, router64=True) - logits.numpy()).max()
    checks.append(f"{name}: independent numpy float64 forward (embedding x 2.7, residual x 0.5 on both branches, "
                  f"recurrent Mamba, MoE + shared MLP, logits / 2.5) vs the reference logits: {mf.fmt(dl)}; with the "
                  f"router in float64 instead of transformers' float32: {mf.fmt(dr)}")
    finish(name, d, GraniteMoeHybridForCausalLM, modeling_granitemoehybrid, logits, caps, attn_layers, len(mixer_calls),
           extra={"experts_implementation": "eager"},
           logit_fn=lambda l, h, i, j, s: s * math.sqrt(HEAD_DIM) * GRANITE_MUP["attention_multiplier"],
           info=f" attention layers 2, 4 (NoPE); MoE margin {rm:.4f};")

    # ---------------------------------------------------------------- falcon_h1
    # Falcon-H1: attention and Mamba-2 side by side in every layer on the same normed input,
    # each with its multipliers; SwiGLU MLP with gate / down multipliers.
    name = "falcon_h1"
    cfg = FalconH1Config(**{**cc, "num_hidden_layers": 3}, mamba_d_ssm=D_INNER, **MAMBA, **FALCON_MUP)
    assert cfg.mamba_rms_norm is False and cfg.mamba_norm_before_gate is True and cfg.mamba_expand == 2
    assert cfg.rope_parameters == {"rope_theta": 10000.0, "rope_type": "default"}, cfg.rope_parameters
    assert cfg.time_step_limit == (0.0, float("inf")) and cfg.tie_word_embeddings is False
    torch.manual_seed(27)
    model = FalconH1ForCausalLM(cfg)
    mf.init_weights(model, seed=2701, bias_std=CONV_BIAS_STD)
    set_mamba_params(model)
    d, saved, keys = fc.save_model(name, model, tok_json, object_hook=float_tags)
    assert saved["model_type"] == "falcon_h1" and saved["head_dim"] == HEAD_DIM and "lm_head.weight" in keys
    for k in FALCON_MUP:
        assert saved[k] == FALCON_MUP[k], (k, saved[k])
    want = {"model.layers.0.mamba.in_proj.weight": (2 * D_INNER + 2 * 2 * 8 + 4, HIDDEN),
            "model.layers.0.mamba.conv1d.weight": (D_INNER + 2 * 2 * 8, 1, 4),
            "model.layers.0.mamba.out_proj.weight": (HIDDEN, D_INNER),
            "model.layers.0.self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
            "model.layers.0.feed_forward.gate_proj.weight": (mf.INTER, HIDDEN),
            "model.layers.0.pre_ff_layernorm.weight": (HIDDEN,), "model.final_layernorm.weight": (HIDDEN,)}
    for k, shape in want.items():
        assert keys.get(k) == shape, (k, keys.get(k))
    assert not any("norm.weight" in k and ".mamba." in k for k in keys) and not any("mup" in k for k in keys)
    mup64 = torch.from_numpy(falcon_mup(saved)).reshape(1, 1, -1)
    assert (mup64 - modeling_falcon_h1.compute_mup_vector(cfg).to(TORCH64)).abs().max() < 1e-7

    def fix_mup(m):  # transformers builds mup_vector in float32 at init: the float64 values
        for layer in m.model.layers:
            assert layer.mamba.mup_vector.shape == mup64.shape
            layer.mamba.mup_vector = mup64.clone()

    model64, logits, caps, attn_layers, mixer_calls, scan_calls, attn_calls = hybrid64_reference(
        d, FalconH1ForCausalLM, modeling_falcon_h1, ids,
        rms_cls=modeling_falcon_h1.FalconH1RMSNorm, mixer_cls=modeling_falcon_h1.FalconH1Mixer, fix=fix_mup,
    )
    assert attn_layers == [0, 1, 2], attn_layers
    assert all(isinstance(layer.mamba.norm, torch.nn.Identity) for layer in model64.model.layers)
    ms, mo, dtr, decr, big = mamba_check(d, mixer_calls, scan_calls, mamba_settings(saved, falcon_mup(saved), saved["ssm_in_multiplier"], None))
    assert ms < MAMBA_TOL and mo < MAMBA_TOL, (ms, mo)
    checks.append(f"{name}: Mamba of layers 1-3 as the plain recurrence (numpy float64; x ssm_in 1.1, mup vector, "
                  f"y silu(z), no norm) vs transformers' chunked scan: scan output {mf.fmt(ms)}, mixer output "
                  f"{mf.fmt(mo)} (|out| <= {big:.2f}); dt in {spread(dtr)}, exp(dt A) in {spread(decr)}")
    da = max((x - mc[1] * FALCON_MUP["attention_in_multiplier"]).abs().max().item()
             for (_, x), mc in zip(attn_calls, mixer_calls))
    assert da == 0.0, da
    dq = qk_check(attn_calls, caps, key_mult=FALCON_MUP["key_multiplier"], rope_theta=10000.0)
    assert dq < 1e-13, dq
    checks.append(f"{name}: attention input == Mamba input x attention_in_multiplier 1.3 (exactly); q, k == "
                  f"RoPE(q_proj(x)), RoPE(k_proj(x)) x key_multiplier 1.9: {mf.fmt(dq)}")
    dl = np.abs(falcon_forward_np(d, ids) - logits.numpy()).max()
    assert dl < 1e-12, dl
    checks.append(f"{name}: independent numpy float64 forward (every multiplier) vs the reference logits: {mf.fmt(dl)}")
    finish(name, d, FalconH1ForCausalLM, modeling_falcon_h1, logits, caps, attn_layers, len(mixer_calls),
           info=" attention + Mamba in every layer;")

    fc.done_files(NAMES, tmp)

    # ---------------------------------------------------------------- logit_key.json
    # make_logit_key_fixtures.py does not list these names yet: added to its SUM_TO_ONE set in
    # memory, for this run only (fixture_common.logit_key_sum_to_one says why). Its check_inputs
    # re-derives attn_scores as q.k / sqrt(d) (with hooks for Gemma, DeepSeek-V3's mscale, logn,
    # scale_invariant) and has none for Granite's attention_multiplier: a name it refuses gets no
    # logit_key.json, and the reason is printed.
    with fc.logit_key_sum_to_one(NAMES):
        accepted = []
        for name in NAMES:
            try:
                lk.build(name)
                accepted.append(name)
            except AssertionError as e:
                checks.append(f"{name}: make_logit_key_fixtures.py refuses it, no logit_key.json written: "
                              f"AssertionError {e}")
        if accepted:
            assert lk.main(accepted) == 0

    fc.report(checks, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
