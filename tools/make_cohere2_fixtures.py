#!/usr/bin/env python3
"""A tiny Cohere2 checkpoint (Command R7B / Command A's family) and its float64 references.

Writes, relative to the repository root (the parent of this file's folder), the model folder
tests/fixtures/models/cohere2/ and the reference files fixture_common.py lists
(tests/fixtures/reference/cohere2.{safetensors,metrics.json,logit_key.json}), nothing else.

Fixture: Cohere2ForCausalLM, hidden 32, vocab 64, 4 layers, GQA 4/2 (head_dim 32 / 4 = 8,
which Cohere2Config always uses), intermediate 64, bos/eos of make_fixtures.common_cfg;
sliding_window 6 with the class's layer_types (sliding_window_pattern 4: layers 1-3 slide and
rotate, layer 4 attends to every earlier key without RoPE), RoPE on interleaved pairs (theta
10000), one bias-free LayerNorm a layer read by attention and MLP in parallel, SwiGLU, tied
embeddings, logit_scale 0.5 (not the default 0.0625, so that a missing scale shows); every
matrix N(0, 0.2), norm scales 1 + 0.1 N; init seed 2601.

Reference: transformers itself, eager, in float64 (make_fixtures.transformers64_reference)
with precision-only patches (the same math, float64): Cohere2LayerNorm (which computes in
float32), the RoPE cos/sin and inv_freq (interleaved, as Cohere2RotaryEmbedding lays them
out) and apply_rotary_pos_emb (which casts q and k to float32), the eager softmax. The q and k
stored are what the eager attention multiplies; attn_scores the scaled logits its softmax
sees. Checks (printed): the unpatched transformers forward agrees (logits < 1e-4; its RoPE
rotation stays in float64, its norms and frequencies float32), each layer's q re-derived in
numpy from the layer's input (LayerNorm, q_proj, interleaved RoPE on the sliding layers, none
on layer 4), the logits re-derived as the final norm's output times the tied embedding times
logit_scale, and every metric re-derived with Python loops.

Deterministic (fixed seeds; a rerun writes the same bytes), a few seconds on one CPU core.

Run:  /tmp/asa-py-venv/bin/python tools/make_cohere2_fixtures.py
"""

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402  (the shared float64 transformers reference)
from make_fixtures import HEAD_DIM, HEADS, TORCH64  # noqa: E402
import make_logit_key_fixtures as lk  # noqa: E402
import fixture_common as fc  # noqa: E402  (helpers shared by the float64 fixture scripts)

from transformers import Cohere2Config, Cohere2ForCausalLM  # noqa: E402
from transformers.models.cohere2 import modeling_cohere2  # noqa: E402

NAMES = ["cohere2"]
LOGIT_SCALE = 0.5
WINDOW = 6


def layer_norm64(self, hidden_states):
    """Cohere2LayerNorm in the input's dtype (float64): no bias."""
    mean = hidden_states.mean(-1, keepdim=True)
    variance = (hidden_states - mean).pow(2).mean(-1, keepdim=True)
    return self.weight * ((hidden_states - mean) * torch.rsqrt(variance + self.variance_epsilon))


def rope_forward64(self, x, position_ids):
    """Cohere2RotaryEmbedding.forward in float64: each frequency twice, interleaved."""
    freqs = position_ids[..., None].to(TORCH64) * self.inv_freq.to(device=x.device, dtype=TORCH64)
    emb = torch.repeat_interleave(freqs, 2, dim=-1)
    return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(x.dtype)


def apply_rotary_pos_emb64(q, k, cos, sin, unsqueeze_dim=1):
    """modeling_cohere2.apply_rotary_pos_emb without its cast to float32."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    rot = modeling_cohere2.rotate_half
    return q * cos + rot(q) * sin, k * cos + rot(k) * sin


def np_layer_norm(x, w, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w


def np_rope_interleaved(x, theta):
    """x [T, heads, d] rotated pairwise: (x[2i], x[2i+1]) by position * theta^(-2i/d)."""
    t, _, d = x.shape
    inv = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    ang = np.arange(t, dtype=np.float64)[:, None, None] * inv[None, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * np.cos(ang) - b * np.sin(ang)
    out[..., 1::2] = b * np.cos(ang) + a * np.sin(ang)
    return out


def q_check(inputs, caps, cfg):
    """Each layer's q re-derived in numpy from the decoder layer's input (its
    input_layernorm, then q_proj, then RoPE where it slides); the largest difference."""
    worst = 0.0
    for layer, (decoder_layer, x) in enumerate(inputs):
        module, norm = decoder_layer.self_attn, decoder_layer.input_layernorm
        assert module.layer_idx == layer
        for b in range(x.shape[0]):
            h = np_layer_norm(x[b], norm.weight.detach().numpy(), norm.variance_epsilon)
            q = (h @ module.q_proj.weight.detach().numpy().T).reshape(x.shape[1], HEADS, HEAD_DIM)
            if cfg.layer_types[layer] == "sliding_attention":
                q = np_rope_interleaved(q, cfg.rope_parameters["rope_theta"])
            worst = max(worst, np.abs(q.transpose(1, 0, 2) - caps[layer]["q"][b].numpy()).max())
    return worst


def main():
    tmp, tok_json, ids, cc = fc.start(NAMES)
    checks, summary = [], []
    name = "cohere2"
    base = {k: v for k, v in cc.items() if k not in ("head_dim", "rms_norm_eps")}
    cfg = Cohere2Config(**{**base, "num_hidden_layers": 4}, sliding_window=WINDOW, logit_scale=LOGIT_SCALE)
    assert cfg.layer_types == ["sliding_attention"] * 3 + ["full_attention"], cfg.layer_types
    assert cfg.head_dim == HEAD_DIM and cfg.tie_word_embeddings, cfg
    torch.manual_seed(26)
    model = Cohere2ForCausalLM(cfg)
    mf.init_weights(model, seed=2601)
    d, saved, keys = fc.save_model(name, model, tok_json)
    assert saved["model_type"] == "cohere2" and saved["logit_scale"] == LOGIT_SCALE, saved
    assert "lm_head.weight" not in keys and "model.layers.0.post_attention_layernorm.weight" not in keys, sorted(keys)
    assert "model.layers.0.input_layernorm.bias" not in keys and keys["model.norm.weight"] == (mf.HIDDEN,)

    def record_layer(m, a, kw, o):
        return m, (a[0] if a else kw["hidden_states"]).detach().clone().numpy()

    with (
        fc.patched((mf, "_rope_forward64", rope_forward64),
                   (modeling_cohere2, "apply_rotary_pos_emb", apply_rotary_pos_emb64)),
        fc.recording(modeling_cohere2.Cohere2DecoderLayer, record_layer) as layer_inputs,
        fc.recording(modeling_cohere2.Cohere2Model, lambda m, a, kw, o: o.last_hidden_state.detach().clone()) as finals,
    ):
        logits, caps, d32 = mf.transformers64_reference(
            d, Cohere2ForCausalLM, modeling_cohere2, ids, "model",
            rms_cls=modeling_cohere2.Cohere2LayerNorm, rms_forward=layer_norm64,
        )
    # the first forward (float64-patched) is the reference: its 4 layers' inputs and final
    # hidden state (the unpatched forward after it records 4 more)
    dq = q_check(layer_inputs[:4], caps, cfg)
    assert dq < 1e-12, dq
    checks.append(f"{name}: every layer's q re-derived in numpy (LayerNorm, q_proj, interleaved RoPE on "
                  f"layers 1-3, none on layer 4): {mf.fmt(dq)}")
    emb = model.model.embed_tokens.weight.detach().to(TORCH64)
    dl = (finals[0] @ emb.T * LOGIT_SCALE - logits).abs().max().item()
    assert dl < 1e-12, dl
    checks.append(f"{name}: logits == final norm output x tied embedding x logit_scale {LOGIT_SCALE}: {mf.fmt(dl)}")
    assert all("visible" in caps[l] for l in range(3)) and "visible" not in caps[3]
    vis = caps[0]["visible"]
    assert vis[19, 14] == 1 and vis[19, 13] == 0 and vis[5, 0] == 1 and vis[6, 0] == 0, vis
    checks.append(f"{name}: transformers float64-patched vs unpatched (float32 norms and frequencies) logits {mf.fmt(d32)}")
    M, margin = mf.write_reference(name, "softmax", ids, logits, caps)
    summary.append((name, mf.peak_stats(caps), margin, M, f" layers 1-3 window {WINDOW}, layer 4 NoPE;", d32))

    fc.done_files(NAMES, tmp)
    assert lk.main(NAMES) == 0
    fc.report(checks, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
