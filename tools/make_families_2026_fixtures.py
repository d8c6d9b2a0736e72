#!/usr/bin/env python3
"""Tiny checkpoints and float64 references for five model families added in 2025-26: SmolLM3,
OLMo 3, GLM-4.5 (glm4_moe), Llama 4 (text) and DeepSeek-V3.

Writes, relative to the repository root (the parent of this file's folder), for each <name>
below and nothing else, the model folder and the three reference files that fixture_common.py
lists; <name>.safetensors holds pattern, q, k, attn_scores (+ visible) for every layer.

Fixtures (hidden 32, vocab 64, rms_norm_eps 1e-5, bos/eos of make_fixtures.common_cfg; each
config class's defaults otherwise, shrunk; every matrix N(0, 0.2), norms 1 + 0.1 N):

  smollm3      SmolLM3ForCausalLM, 4 layers, GQA 4/2, head_dim 8, rope_theta 2e6 (the class
               default), no_rope_layer_interval 4: layer 4 is NoPE (no_rope_layers [1,1,1,0]),
               tied embeddings; init seed 2101
  olmo3        Olmo3ForCausalLM, 4 layers, GQA 4/2, QK-norm over the whole q [32] / k [16]
               projections, post-attention / post-feedforward norms, sliding_window 6 with the
               class's layer_types (layers 1-3 slide, layer 4 full), RoPE per layer type
               (both theta 5e5); init seed 2201
  glm4_moe     Glm4MoeForCausalLM, 3 layers (layer 1 dense: first_k_dense_replace 1), GQA 4/2,
               q/k/v biases N(0, 0.5^2) (attention_bias on, so they are exercised), per-head
               QK-norm, partial_rotary_factor 0.5 (the first 4 of 8 dims rotate, half-split),
               4 routed experts of 16, 2 a token, 1 shared expert, n_group 2 / topk_group 1,
               sigmoid router with e_score_correction_bias N(0, 0.3^2), norm_topk_prob,
               routed_scaling_factor 1.5; init seeds 2301, 2302
  llama4_text  Llama4ForCausalLM (Llama4TextConfig, model_type llama4_text), 4 layers, GQA 4/2,
               interleaved (complex) RoPE, L2 QK-norm after RoPE on RoPE layers, layer 4 NoPE
               (no_rope_layer_interval 4) with attention temperature tuning (floor_scale 4,
               attn_scale 0.5: q x 1 + 0.5 ln(1 + floor((i + 1) / 4)), up to 1.90 at i = 19),
               layers 1-3 chunked attention (attention_chunk_size 8: 3 chunks of the 20
               tokens), layers 2 and 4 MoE (interleave_moe_layer_step 2): 4 experts of 16,
               top-2, sigmoid scores, plus a shared expert; dense layers intermediate 64;
               init seed 2401
  deepseek_v3  DeepseekV3ForCausalLM, 3 layers (layer 1 dense), MLA: q_lora_rank 16,
               kv_lora_rank 16, qk_nope_head_dim 8, qk_rope_head_dim 4 (interleaved RoPE,
               rope_interleave true), v_head_dim 6, 4 heads; YaRN (factor 4, original 16,
               mscale = mscale_all_dim = 1: softmax scale 12^-1/2 x (1 + 0.1 ln 4)^2), 4 routed
               experts of 16, 2 a token, n_group 2 / topk_group 1, 1 shared expert, sigmoid
               router with e_score_correction_bias N(0, 0.3^2), norm_topk_prob,
               routed_scaling_factor 2.5; q_a_proj and kv_a_proj_with_mqa's 16 latent rows
               x 0.01, so the latents' mean square (~1e-4) makes q_a_layernorm /
               kv_a_layernorm's eps (1e-6, their constructor default, not rms_norm_eps) show
               in the logits; init seeds 2507, 2502

Reference: transformers itself, eager, in float64 (make_fixtures.transformers64_reference),
with precision-only patches (the same math, float64): RMSNorm, RoPE cos/sin and inv_freq
(Llama 4: its complex freqs_cis and apply_rotary_emb), the eager softmax, Llama 4's L2 norm and
its temperature-tuning scale (computed from positions.float() in transformers). The q and k
stored are what the eager attention multiplies (after QK-norm, RoPE, Llama 4's L2 norm and
temperature); attn_scores are the scaled logits its softmax sees (DeepSeek: with the YaRN mscale
factor). Kept as transformers does it: the routers of glm4_moe / deepseek_v3 run in float32
(sigmoid, bias, group and top-k choice, renormalisation, scaling), Llama 4's router sigmoid too
(its top-k is in the model dtype); YaRN's inv_freq is transformers' float32 one, upcast. Checks
(printed): the unpatched transformers forward agrees (logits < 1e-4), the routing of every token
is re-derived in float64 with a clear margin, the NoPE / temperature-tuned q of Llama 4 and
SmolLM3 re-derived from the layer input, and every metric re-derived with Python loops.

Deterministic (fixed seeds; a rerun writes the same bytes), about 10 s on one CPU core.

Run:  /tmp/asa-py-venv/bin/python tools/make_families_2026_fixtures.py
"""

import contextlib
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402  (the shared float64 transformers reference)
from make_fixtures import HEAD_DIM, HEADS, HIDDEN, KV_HEADS, TORCH64  # noqa: E402
import make_logit_key_fixtures as lk  # noqa: E402
import fixture_common as fc  # noqa: E402  (helpers shared by the float64 fixture scripts)

from transformers import (  # noqa: E402
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    Glm4MoeConfig,
    Glm4MoeForCausalLM,
    Llama4ForCausalLM,
    Llama4TextConfig,
    Olmo3Config,
    Olmo3ForCausalLM,
    SmolLM3Config,
    SmolLM3ForCausalLM,
)
from transformers.models.deepseek_v3 import modeling_deepseek_v3  # noqa: E402
from transformers.models.glm4_moe import modeling_glm4_moe  # noqa: E402
from transformers.models.llama4 import modeling_llama4  # noqa: E402
from transformers.models.olmo3 import modeling_olmo3  # noqa: E402
from transformers.models.smollm3 import modeling_smollm3  # noqa: E402

NAMES = ["smollm3", "olmo3", "glm4_moe", "llama4_text", "deepseek_v3"]
MOE_INTER = 16
# glm4_moe and deepseek_v3: DeepSeek-V3's mixture (4 routed experts in 2 groups, the best
# group kept, 2 a token, renormalised, 1 shared expert) after one dense layer
DEEPSEEK_MOE = dict(
    first_k_dense_replace=1,
    n_routed_experts=4,
    num_experts_per_tok=2,
    n_group=2,
    topk_group=1,
    n_shared_experts=1,
    moe_intermediate_size=MOE_INTER,
    norm_topk_prob=True,
)
BIAS_STD = 0.3  # e_score_correction_bias ~ N(0, BIAS_STD^2)
ROUTE_MARGIN = 1e-4
LATENT_SCALE = 0.01  # deepseek_v3: q_a_proj and the latent rows of kv_a_proj_with_mqa scaled by this  # every routing decision clear of its runner-up by at least this


# ----------------------------------------------------------------------------
# Patches passed into make_fixtures.transformers64_reference (nothing in it is edited)
# ----------------------------------------------------------------------------
class EagerExperts:
    """Stands in for a model class: from_pretrained runs the experts by transformers' plain
    loop (experts_implementation="eager"; its grouped kernels need float32), whatever the
    folder is called (make_fixtures keys that on "moe" in the folder name)."""

    def __init__(self, cls):
        self.cls = cls
        self.__name__ = cls.__name__

    def from_pretrained(self, *args, **kwargs):
        kwargs.setdefault("experts_implementation", "eager")
        return self.cls.from_pretrained(*args, **kwargs)


# Llama 4, float64 with the same math: RoPE as complex numbers (torch.polar) of the float64
# angles, applied to the (even, odd) pairs; the weightless L2 norm x rsqrt(mean x^2 + eps);
# RMSNorm; the temperature-tuning scale computed from float64 positions.
@torch.no_grad()
def _llama4_rope_forward64(self, x, position_ids):
    freqs = position_ids[..., None].to(TORCH64) * self.inv_freq.to(device=x.device, dtype=TORCH64)
    return torch.polar(torch.ones_like(freqs), freqs) * self.attention_scaling


def _llama4_apply_rotary_emb64(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.reshape(*xk.shape[:-1], -1, 2))
    xq_out = torch.view_as_real(xq_ * freqs_cis[:, :, None, :]).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis[:, :, None, :]).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def _llama4_l2_forward64(self, x):
    return self._norm(x)


def _llama4_rms_forward64(self, x):
    return self._norm(x) * self.weight


def _llama4_attention_forward64():
    """Llama4TextAttention.forward from transformers' own source with one change: the
    temperature-tuning positions in the query's dtype instead of float32."""
    return fc.from_source(modeling_llama4.Llama4TextAttention.forward,
                          [("positions.float()", "positions.to(query_states.dtype)")])


@contextlib.contextmanager
def llama4_float64():
    with fc.patched(
        (mf, "_rope_forward64", _llama4_rope_forward64),  # what transformers64_reference installs
        (modeling_llama4, "apply_rotary_emb", _llama4_apply_rotary_emb64),
        (modeling_llama4.Llama4TextL2Norm, "forward", _llama4_l2_forward64),
        (modeling_llama4.Llama4TextAttention, "forward", _llama4_attention_forward64()),
    ):
        yield


# ----------------------------------------------------------------------------
# Independent float64 checks of what transformers did
# ----------------------------------------------------------------------------
def group_routing_check(calls, n_layers, cfg):
    """DeepSeek-V3 / GLM-4.5 routing re-derived in float64 from each router's input: sigmoid
    scores s, choice scores c = s + bias, group score = sum of the top 2 c in the group,
    topk_group groups kept, top_k of c among them, weights s / sum(s) x routed_scaling_factor.
    Returns (largest weight difference to transformers' float32 weights, smallest margin of a
    group or expert choice, tokens whose experts the bias changes, tokens)."""
    E, G, TG, K = cfg.n_routed_experts, cfg.n_group, cfg.topk_group, cfg.num_experts_per_tok
    dw, margin, moved, n = 0.0, float("inf"), 0, 0
    for router, x, (_, w32, idx32) in calls[:n_layers]:
        W = router.weight.detach().to(TORCH64)
        bias = router.e_score_correction_bias.detach().to(TORCH64)
        s = torch.sigmoid(x.reshape(-1, x.shape[-1]).to(TORCH64) @ W.T)

        def choose(c):
            grp = c.view(-1, G, E // G).topk(2, dim=-1).values.sum(-1)
            gs = grp.sort(dim=-1, descending=True).values
            gm = (gs[:, TG - 1] - gs[:, TG]).min().item() if TG < G else float("inf")
            keep = torch.zeros_like(grp, dtype=torch.bool).scatter_(1, grp.topk(TG, dim=-1).indices, True)
            cm = c.masked_fill(~keep.repeat_interleave(E // G, dim=1), float("-inf"))
            cs = cm.sort(dim=-1, descending=True).values
            em = (cs[:, K - 1] - cs[:, K]).min().item()
            return cm.topk(K, dim=-1).indices.sort(dim=-1).values, min(gm, em)

        idx, m = choose(s + bias)
        idx_nobias, _ = choose(s)
        assert torch.equal(idx, idx32.sort(dim=-1).values), "float64 routing chose other experts"
        w = s.gather(1, idx)
        if cfg.norm_topk_prob:
            w = w / w.sum(-1, keepdim=True)
        w = w * cfg.routed_scaling_factor
        order = idx32.sort(dim=-1).indices
        dw = max(dw, (w - w32.gather(1, order).to(TORCH64)).abs().max().item())
        margin = min(margin, m)
        moved += int((idx != idx_nobias).any(-1).sum())
        n += idx.shape[0]
    return dw, margin, moved, n


def llama4_routing_check(calls, n_layers, k):
    """Llama 4's router re-derived: logits x W^T, top-k, sigmoid of the chosen logits (0 for
    the others). Returns (largest score difference to transformers' float32 sigmoid, smallest
    margin between the k-th and the next logit)."""
    ds, margin = 0.0, float("inf")
    for router, x, (scores, _) in calls[:n_layers]:
        logits = fc.router_logits64(router, x)
        margin = min(margin, fc.topk_margin(logits, k))
        top = logits.topk(k, dim=-1)
        want = torch.zeros_like(logits).scatter_(1, top.indices, torch.sigmoid(top.values))
        ds = max(ds, (want - scores.to(TORCH64)).abs().max().item())
    return ds, margin


def nope_q_check(attn_inputs, caps, layer, scale_fn):
    """The q of NoPE layer `layer` re-derived from the attention's input: q_proj(x) per head,
    times scale_fn(positions) (Llama 4's temperature; 1 for SmolLM3), no RoPE, no norm."""
    module, x = attn_inputs[layer]
    assert module.layer_idx == layer
    Bn, Tn, _ = x.shape
    q = torch.nn.functional.linear(x, module.q_proj.weight, module.q_proj.bias).view(Bn, Tn, -1, HEAD_DIM)
    q = (q * scale_fn(torch.arange(Tn, dtype=TORCH64)).view(1, Tn, 1, 1)).transpose(1, 2)
    return (q - caps[layer]["q"]).abs().max().item()


# ----------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------
def main():
    tmp, tok_json, ids, cc = fc.start(NAMES)
    checks, summary = [], []

    def finish(name, logits, caps, d32, info="", logit_fn=None):
        checks.append(f"{name}: transformers float64-patched vs unpatched (float32 internals) logits {mf.fmt(d32)}")
        M, margin = mf.write_reference(name, "softmax", ids, logits, caps, logit_fn=logit_fn)
        summary.append((name, mf.peak_stats(caps), margin, M, info, d32))

    # ---------------------------------------------------------------- smollm3
    # SmolLM3: the Llama layout (input / post-attention RMSNorm, SwiGLU, GQA) with every 4th
    # layer NoPE: no_rope_layers [1, 1, 1, 0] (1 = this layer rotates), tied embeddings.
    name = "smollm3"
    cfg = SmolLM3Config(**{**cc, "num_hidden_layers": 4})
    assert cfg.no_rope_layers == [1, 1, 1, 0] and cfg.layer_types == ["full_attention"] * 4, cfg
    torch.manual_seed(21)
    model = SmolLM3ForCausalLM(cfg)
    mf.init_weights(model, seed=2101)
    d, saved, keys = fc.save_model(name, model, tok_json)
    assert saved["model_type"] == "smollm3" and saved["tie_word_embeddings"] and "lm_head.weight" not in keys
    assert saved["rope_parameters"] == {"rope_theta": 2000000.0, "rope_type": "default"}, saved["rope_parameters"]
    with fc.recording(modeling_smollm3.SmolLM3Attention, lambda m, a, kw, o: (m, kw["hidden_states"].detach().clone())) as ins:
        logits, caps, d32 = mf.transformers64_reference(
            d, SmolLM3ForCausalLM, modeling_smollm3, ids, "model", rms_cls=modeling_smollm3.SmolLM3RMSNorm
        )
    dq = nope_q_check(ins, caps, 3, lambda p: torch.ones_like(p))
    assert dq < 1e-14, dq
    checks.append(f"{name}: layer 4 (NoPE) q == q_proj(x) un-rotated: {mf.fmt(dq)}")
    finish(name, logits, caps, d32, " layer 4 NoPE; tied;")

    # ---------------------------------------------------------------- olmo3
    # OLMo 3: OLMo 2's layout (no input norm; RMSNorm after attention and after the MLP, QK-norm
    # over the whole q / k projections) with sliding-window layers: the class's layer_types
    # (every 4th layer full) and per-layer-type RoPE.
    name = "olmo3"
    cfg = Olmo3Config(**{**cc, "num_hidden_layers": 4}, sliding_window=6)
    assert cfg.layer_types == ["sliding_attention"] * 3 + ["full_attention"], cfg.layer_types
    torch.manual_seed(22)
    model = Olmo3ForCausalLM(cfg)
    mf.init_weights(model, seed=2201)
    d, saved, keys = fc.save_model(name, model, tok_json)
    assert keys["model.layers.0.self_attn.q_norm.weight"] == (HEADS * HEAD_DIM,)
    assert keys["model.layers.0.self_attn.k_norm.weight"] == (KV_HEADS * HEAD_DIM,)
    assert "model.layers.0.input_layernorm.weight" not in keys and "lm_head.weight" in keys
    logits, caps, d32 = mf.transformers64_reference(
        d, Olmo3ForCausalLM, modeling_olmo3, ids, "model", rms_cls=modeling_olmo3.Olmo3RMSNorm
    )
    assert all("visible" in caps[l] for l in range(3)) and "visible" not in caps[3]
    vis = caps[0]["visible"]
    assert vis[19, 14] == 1 and vis[19, 13] == 0 and vis[5, 0] == 1 and vis[6, 0] == 0, vis
    finish(name, logits, caps, d32, " layers 1-3 window 6;")

    # ---------------------------------------------------------------- glm4_moe
    # GLM-4.5: Llama layout with q/k/v biases, per-head QK-norm before partial (0.5) RoPE,
    # layer 1 dense, layers 2-3 a sigmoid-routed, group-limited MoE with a shared expert.
    name = "glm4_moe"
    cfg = Glm4MoeConfig(
        **{**cc, "num_hidden_layers": 3},
        **DEEPSEEK_MOE,
        use_qk_norm=True,
        attention_bias=True,
        routed_scaling_factor=1.5,
    )
    assert cfg.rope_parameters["partial_rotary_factor"] == 0.5, cfg.rope_parameters
    torch.manual_seed(23)
    model = Glm4MoeForCausalLM(cfg)
    mf.init_weights(model, seed=2301, bias_std=0.5)
    gen = torch.Generator().manual_seed(2302)
    with torch.no_grad():
        for l in range(1, 3):
            model.model.layers[l].mlp.gate.e_score_correction_bias.copy_(BIAS_STD * torch.randn(4, generator=gen))
    d, saved, keys = fc.save_model(name, model, tok_json)
    assert keys["model.layers.1.mlp.experts.3.gate_proj.weight"] == (MOE_INTER, HIDDEN), sorted(keys)
    assert keys["model.layers.1.mlp.gate.e_score_correction_bias"] == (4,)
    assert keys["model.layers.1.mlp.shared_experts.up_proj.weight"] == (MOE_INTER, HIDDEN)
    assert keys["model.layers.0.mlp.gate_proj.weight"] == (mf.INTER, HIDDEN)
    assert keys["model.layers.0.self_attn.q_norm.weight"] == (HEAD_DIM,)
    assert "model.layers.0.self_attn.q_proj.bias" in keys and "model.layers.0.self_attn.o_proj.bias" not in keys
    with fc.recording(modeling_glm4_moe.Glm4MoeTopkRouter,
                   lambda m, a, kw, o: (m, a[0].detach().clone(), tuple(t.detach().clone() for t in o))) as calls:
        logits, caps, d32 = mf.transformers64_reference(
            d, EagerExperts(Glm4MoeForCausalLM), modeling_glm4_moe, ids, "model", rms_cls=modeling_glm4_moe.Glm4MoeRMSNorm
        )
    dw, rm, moved, n = group_routing_check(calls, 2, cfg)
    assert rm > ROUTE_MARGIN and moved > 0 and dw < 1e-6, (dw, rm, moved)
    checks.append(f"{name}: routing re-derived in float64: same experts for all {n} token-layers, smallest "
                  f"group/expert margin {rm:.4f}, weights vs transformers' float32 {mf.fmt(dw)}; "
                  f"e_score_correction_bias changes the experts of {moved}")
    finish(name, logits, caps, d32, f" MoE margin {rm:.4f};")

    # ---------------------------------------------------------------- llama4_text
    # Llama 4 (text): complex-pair RoPE, L2 QK-norm after RoPE on RoPE layers, chunked
    # attention (8) on RoPE layers, layer 4 NoPE with full attention and temperature tuning,
    # MoE (top-2 sigmoid + shared expert) on layers 2 and 4.
    name = "llama4_text"
    cfg = Llama4TextConfig(
        **{**cc, "num_hidden_layers": 4, "intermediate_size": MOE_INTER},
        intermediate_size_mlp=mf.INTER,
        num_local_experts=4,
        num_experts_per_tok=2,
        interleave_moe_layer_step=2,
        attention_chunk_size=8,
        attn_temperature_tuning=True,
        floor_scale=4,
        attn_scale=0.5,
        use_qk_norm=True,
    )
    assert cfg.no_rope_layers == [1, 1, 1, 0] and cfg.moe_layers == [1, 3], cfg
    assert cfg.layer_types == ["chunked_attention"] * 3 + ["full_attention"], cfg.layer_types
    torch.manual_seed(24)
    model = Llama4ForCausalLM(cfg)
    mf.init_weights(model, seed=2401)
    d, saved, keys = fc.save_model(name, model, tok_json)
    assert saved["model_type"] == "llama4_text", saved["model_type"]
    assert keys["model.layers.1.feed_forward.experts.gate_up_proj"] == (4, HIDDEN, 2 * MOE_INTER), sorted(keys)
    assert keys["model.layers.1.feed_forward.experts.down_proj"] == (4, MOE_INTER, HIDDEN)
    assert keys["model.layers.1.feed_forward.router.weight"] == (4, HIDDEN)
    assert keys["model.layers.0.feed_forward.gate_proj.weight"] == (mf.INTER, HIDDEN)

    def temperature(p):
        return torch.log1p(torch.floor((p + 1.0) / 4)) * 0.5 + 1.0

    with llama4_float64(), fc.recording(
        modeling_llama4.Llama4Router, lambda m, a, kw, o: (m, a[0].detach().clone(), tuple(t.detach().clone() for t in o))
    ) as calls, fc.recording(
        modeling_llama4.Llama4TextAttention, lambda m, a, kw, o: (m, kw["hidden_states"].detach().clone())
    ) as ins:
        logits, caps, d32 = mf.transformers64_reference(
            d, Llama4ForCausalLM, modeling_llama4, ids, "model",
            rms_cls=modeling_llama4.Llama4TextRMSNorm, rms_forward=_llama4_rms_forward64,
        )
    assert all("visible" in caps[l] for l in range(3)) and "visible" not in caps[3]
    vis = caps[0]["visible"]
    ii, jj = torch.arange(20)[:, None], torch.arange(20)[None, :]
    assert torch.equal(vis, ((jj <= ii) & (jj // 8 == ii // 8)).to(TORCH64)), vis
    dq = nope_q_check(ins, caps, 3, temperature)
    assert dq < 1e-14, dq
    # the L2 norm is applied after RoPE: every rotated q / k head vector has mean square 1 (- eps)
    dn = max((c[key].pow(2).mean(-1) - 1.0).abs().max().item() for c in caps[:3] for key in ("q", "k"))
    assert dn < 1e-3, dn
    ds, rm = llama4_routing_check(calls, 2, 2)
    assert rm > ROUTE_MARGIN and ds < 1e-6, (ds, rm)
    t = temperature(torch.arange(20, dtype=TORCH64))
    checks.append(f"{name}: chunked mask (chunks of 8) on layers 1-3; layer 4 (NoPE) q == q_proj(x) x "
                  f"(1 + 0.5 ln(1 + floor((i+1)/4))) [{t[0]:.4f} .. {t[-1]:.4f}]: {mf.fmt(dq)}; "
                  f"L2-normed q/k mean square - 1 <= {dn:.1e}; router top-2 margin {rm:.4f}, sigmoid "
                  f"scores vs transformers' float32 {mf.fmt(ds)}")
    finish(name, logits, caps, d32, f" MoE margin {rm:.4f};")

    # ---------------------------------------------------------------- deepseek_v3
    # DeepSeek-V3: MLA (low-rank q and kv with their own RMSNorms, a shared rotary key),
    # interleaved RoPE on 4 of the 12 q/k dims, YaRN with the softmax scale times mscale^2,
    # layer 1 dense, layers 2-3 the sigmoid group-limited MoE with a shared expert.
    name = "deepseek_v3"
    yarn = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16,
            "mscale": 1.0, "mscale_all_dim": 1.0}
    cfg = DeepseekV3Config(
        **{**{k: v for k, v in cc.items() if k != "head_dim"}, "num_hidden_layers": 3, "num_key_value_heads": HEADS},
        **DEEPSEEK_MOE,
        q_lora_rank=16,
        kv_lora_rank=16,
        qk_nope_head_dim=8,
        qk_rope_head_dim=4,
        v_head_dim=6,
        routed_scaling_factor=2.5,
        rope_parameters=dict(yarn),
    )
    assert cfg.rope_interleave is True and cfg.head_dim == 4 and cfg.qk_head_dim == 12
    torch.manual_seed(25)
    model = DeepseekV3ForCausalLM(cfg)
    mf.init_weights(model, seed=2507)
    gen = torch.Generator().manual_seed(2502)
    with torch.no_grad():
        for l in range(1, 3):
            model.model.layers[l].mlp.gate.e_score_correction_bias.copy_(BIAS_STD * torch.randn(4, generator=gen))
        for l in range(3):  # small latents: their RMSNorms' eps (1e-6, not rms_norm_eps) shows
            att = model.model.layers[l].self_attn
            att.q_a_proj.weight.mul_(LATENT_SCALE)
            att.kv_a_proj_with_mqa.weight[:16].mul_(LATENT_SCALE)  # the latent rows, not k_rot's
    mscale = 0.1 * 1.0 * math.log(4.0) + 1.0
    scale = 12 ** -0.5 * mscale * mscale
    assert abs(model.model.layers[0].self_attn.scaling - scale) < 1e-15, model.model.layers[0].self_attn.scaling
    assert model.model.rotary_emb.attention_scaling == 1.0  # mscale / mscale_all_dim = 1: cos/sin unscaled
    d, saved, keys = fc.save_model(name, model, tok_json)
    assert saved["rope_parameters"] == yarn, saved["rope_parameters"]
    want = {"q_a_proj.weight": (16, HIDDEN), "q_a_layernorm.weight": (16,), "q_b_proj.weight": (HEADS * 12, 16),
            "kv_a_proj_with_mqa.weight": (16 + 4, HIDDEN), "kv_a_layernorm.weight": (16,),
            "kv_b_proj.weight": (HEADS * (8 + 6), 16), "o_proj.weight": (HIDDEN, HEADS * 6)}
    for k, shape in want.items():
        assert keys[f"model.layers.0.self_attn.{k}"] == shape, (k, keys.get(f"model.layers.0.self_attn.{k}"))
    assert keys["model.layers.2.mlp.experts.0.down_proj.weight"] == (HIDDEN, MOE_INTER)
    assert keys["model.layers.2.mlp.gate.e_score_correction_bias"] == (4,)
    with fc.recording(modeling_deepseek_v3.DeepseekV3TopkRouter,
                   lambda m, a, kw, o: (m, a[0].detach().clone(), tuple(t.detach().clone() for t in o))) as calls:
        logits, caps, d32 = mf.transformers64_reference(
            d, EagerExperts(DeepseekV3ForCausalLM), modeling_deepseek_v3, ids, "model",
            rms_cls=modeling_deepseek_v3.DeepseekV3RMSNorm,
        )
    assert caps[0]["q"].shape == (mf.B, HEADS, mf.T, 12) and caps[0]["k"].shape == (mf.B, HEADS, mf.T, 12)
    dw, rm, moved, n = group_routing_check(calls, 2, cfg)
    assert rm > ROUTE_MARGIN and moved > 0 and dw < 1e-6, (dw, rm, moved)
    checks.append(f"{name}: softmax scale 12^-1/2 x {mscale:.6f}^2 = {scale:.9f}; routing re-derived in "
                  f"float64: same experts for all {n} token-layers, smallest group/expert margin {rm:.4f}, "
                  f"weights vs transformers' float32 {mf.fmt(dw)}; e_score_correction_bias changes the "
                  f"experts of {moved}")
    # the latent norms' eps matters: transformers with eps = rms_norm_eps there moves the logits
    eps_model = DeepseekV3ForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager",
                                                      experts_implementation="eager").double().eval()
    with torch.no_grad():
        base = eps_model(input_ids=ids, use_cache=False).logits
        for layer in eps_model.model.layers:
            assert layer.self_attn.q_a_layernorm.variance_epsilon == 1e-6 == layer.self_attn.kv_a_layernorm.variance_epsilon
            layer.self_attn.q_a_layernorm.variance_epsilon = cfg.rms_norm_eps
            layer.self_attn.kv_a_layernorm.variance_epsilon = cfg.rms_norm_eps
        d_eps = (eps_model(input_ids=ids, use_cache=False).logits - base).abs().max().item()
    assert d_eps > 1e-3, d_eps
    checks.append(f"{name}: q_a_layernorm / kv_a_layernorm eps 1e-6 (their default) vs rms_norm_eps 1e-5: "
                  f"logits move {d_eps:.2e} (latent rows of q_a_proj / kv_a_proj_with_mqa x {LATENT_SCALE})")
    finish(name, logits, caps, d32, f" MoE margin {rm:.4f};", logit_fn=lambda l, h, i, j, s: s * mscale * mscale)

    fc.done_files(NAMES, tmp)

    # ---------------------------------------------------------------- logit_key.json
    assert lk.main(NAMES) == 0

    fc.report(checks, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
