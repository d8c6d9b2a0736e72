#!/usr/bin/env python
"""Fixtures for the trainer (issue 6), written next to tests/fixtures/train/.

  python tools/train_check.py grads
      For each variant: a tiny random model (f32 weights), token ids, and the float64
      PyTorch autograd gradients of the mean next-token cross-entropy with respect to every
      parameter (sink logits, alpha_proj, the gate half of q_proj, LogN's s_h included).
      The forward pass is tools/make_fixtures.py's own_forward (the conformance reference).
      -> tests/fixtures/train/grads_<variant>.safetensors

  python tools/train_check.py hf CHECKPOINT
      Loads a checkpoint written by `asa-analyze train --variant softmax` with transformers
      (LlamaForCausalLM, eager attention, float32) and records its logits on fixed ids.
      -> tests/fixtures/train/softmax_hf_logits.safetensors

The Rust side (crates/asa-analysis/tests/library/train.rs) compares its gradients and logits with these files.
"""
import json
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_fixtures as mf  # noqa: E402

ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "tests", "fixtures", "train")

# Tiny shapes, mirrored by crates/asa-analysis/tests/library/train.rs (grad_arch).
HIDDEN, LAYERS, HEADS, KV_HEADS, INTER, VOCAB = 16, 2, 2, 2, 24, 40
HEAD_DIM = HIDDEN // HEADS
B, T = 2, 12
# Every variant of SPEC section 3 (new ones at the end: each keeps its seed, 600 + index).
VARIANTS = ["softmax", "off_by_one", "sink", "gated", "affine_scaled", "affine_scaled_gated",
            "scale_invariant", "logn"]


def config(variant):
    # the blocks asa_analysis::train::params::config_json writes for these variants
    return {
        "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
        "num_hidden_layers": LAYERS, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "scale_invariant": {"tau": 10.0}, "logn": {"scale": 1.0},
    }


def params(variant, gen):
    gated = variant in ("gated", "affine_scaled_gated")
    affine = variant.startswith("affine")
    shapes = {"model.embed_tokens.weight": (VOCAB, HIDDEN), "model.norm.weight": (HIDDEN,),
              "lm_head.weight": (VOCAB, HIDDEN)}
    for l in range(LAYERS):
        p = f"model.layers.{l}."
        shapes.update({
            p + "input_layernorm.weight": (HIDDEN,),
            p + "post_attention_layernorm.weight": (HIDDEN,),
            p + "self_attn.q_proj.weight": ((2 if gated else 1) * HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.o_proj.weight": (HIDDEN, HEADS * HEAD_DIM),
            p + "mlp.gate_proj.weight": (INTER, HIDDEN),
            p + "mlp.up_proj.weight": (INTER, HIDDEN),
            p + "mlp.down_proj.weight": (HIDDEN, INTER),
        })
        if variant == "sink":
            shapes[p + "self_attn.sinks"] = (HEADS,)
        if affine:
            shapes[p + "self_attn.alpha_proj.weight"] = (HEADS, HIDDEN)
        if variant == "logn":
            shapes[p + "self_attn.logn_scale"] = (HEADS,)
    sd = {}
    for name, shape in sorted(shapes.items()):
        if name.endswith("norm.weight"):
            t = 1.0 + 0.1 * torch.randn(shape, generator=gen, dtype=torch.float64)
        elif name.endswith("logn_scale"):
            t = 1.0 + 0.3 * torch.randn(shape, generator=gen, dtype=torch.float64)
        elif name.endswith("sinks"):
            t = torch.randn(shape, generator=gen, dtype=torch.float64)
        elif "alpha_proj" in name:
            # z = w . x spans the linear part of the clipping (|z| < 5) and both kinks
            t = 1.5 * torch.randn(shape, generator=gen, dtype=torch.float64)
        else:
            t = 0.4 * torch.randn(shape, generator=gen, dtype=torch.float64)
        sd[name] = t.float().double()  # the exact f32 values the Rust side loads
    return sd


def grads():
    os.makedirs(OUT, exist_ok=True)
    for i, variant in enumerate(VARIANTS):
        gen = torch.Generator().manual_seed(600 + i)
        sd = params(variant, gen)
        ids = torch.randint(0, VOCAB, (B, T + 1), generator=gen)
        buffers = {}
        if variant.startswith("affine"):
            for l in range(LAYERS):
                ma = torch.rand(HEADS, generator=gen, dtype=torch.float64).float().double()
                buffers[f"model.layers.{l}.self_attn.alpha_ma"] = ma
        leaves = {k: v.clone().requires_grad_(True) for k, v in sd.items()}
        logits, caps = mf.own_forward({**leaves, **buffers}, config(variant), ids[:, :T], variant,
                                      affine={"activation": "linear_clipping", "beta_length": "full"})
        loss = F.cross_entropy(logits.reshape(B * T, VOCAB), ids[:, 1:].reshape(-1))
        loss.backward()
        out = {k: v.float() for k, v in sd.items()}
        out.update({k: v.float() for k, v in buffers.items()})
        out.update({"grad." + k: v.grad for k, v in leaves.items()})
        out["ids"] = ids.to(torch.int64)
        out["loss"] = loss.detach().reshape(1)
        if variant.startswith("affine"):
            z = torch.cat([c["alpha_pre"].flatten() for c in caps])
            print(f"  {variant}: alpha_pre in [{z.min():.2f}, {z.max():.2f}], clipped share "
                  f"{((z.abs() >= 5).double().mean()):.2f}")
        path = os.path.join(OUT, f"grads_{variant}.safetensors")
        save_file({k: v.contiguous() for k, v in out.items()}, path)
        print(f"{path}: loss {loss.item():.6f}")


def hf(ckpt):
    from transformers import LlamaForCausalLM
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    assert cfg["attention_variant"] == "softmax", cfg["attention_variant"]
    model = LlamaForCausalLM.from_pretrained(ckpt, torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(2, cfg["vocab_size"], (2, 24), generator=gen)
    ids[:, 0] = cfg["bos_token_id"]
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    path = os.path.join(OUT, "softmax_hf_logits.safetensors")
    save_file({"ids": ids.to(torch.int64).contiguous(), "logits": logits.float().contiguous()}, path)
    print(f"{path}: transformers {__import__('transformers').__version__}, logits {tuple(logits.shape)}")


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "grads":
        grads()
    elif len(sys.argv) == 3 and sys.argv[1] == "hf":
        hf(sys.argv[2])
    else:
        sys.exit(__doc__)
