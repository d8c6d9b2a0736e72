#!/usr/bin/env python3
"""Writes a random-weight Llama checkpoint of a public shape as transformers saves one:
config.json, bf16 safetensors shards of at most 5 GB named model-0000K-of-0000N.safetensors,
and model.safetensors.index.json ({"metadata": {"total_size": ...}, "weight_map": {...}}).
Weights are N(0, 0.02) (transformers' initializer_range), norms 1. For the layer-streaming
benchmarks (benches/streaming.sh): an 8B model is 16 GB, not for CI.

    python3 tools/make_random_checkpoint.py --shape 8b --out /data/llama8b-random
    python3 tools/make_random_checkpoint.py --shape small --out /tmp/small   # a few hundred MB
    python3 tools/make_random_checkpoint.py --shape deepseek_v3_4 --experts 32 --out /data/ds4

`deepseek_v3_4` is DeepSeek-V3 at full width (hidden 7168, 128 heads of multi-head latent
attention, YaRN factor 40) with its first 4 layers: 3 dense, then one mixture of `--experts`
routed experts (256 in the model: 22.5 GB of bf16 for that one layer) and the shared expert.

Needs numpy only (bf16 is written as the top 16 bits of each float32).
"""
import argparse
import json
import os
import struct

import numpy as np

SHAPES = {
    # Llama-3-8B
    "8b": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8, intermediate_size=14336, vocab_size=128256,
               tie_word_embeddings=False, rope_theta=500000.0),
    # Llama-3.2-1B
    "1b": dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, intermediate_size=8192, vocab_size=128256,
               tie_word_embeddings=True, rope_theta=500000.0),
    # Llama-3-70B width, 4 of its 80 layers (GPU layer streaming: the per-layer cost)
    "70b4": dict(hidden_size=8192, num_hidden_layers=4, num_attention_heads=64,
                 num_key_value_heads=8, intermediate_size=28672, vocab_size=128256,
                 tie_word_embeddings=False, rope_theta=500000.0),
    # DeepSeek-V3's width and its first 4 layers (3 dense, 1 MoE; issue 52's streaming bench)
    "deepseek_v3_4": dict(model_type="deepseek_v3", hidden_size=7168, num_hidden_layers=4,
                          num_attention_heads=128, num_key_value_heads=128, intermediate_size=18432,
                          vocab_size=129280, tie_word_embeddings=False, q_lora_rank=1536,
                          kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                          v_head_dim=128, n_routed_experts=256, n_shared_experts=1,
                          num_experts_per_tok=8, n_group=8, topk_group=4,
                          moe_intermediate_size=2048, first_k_dense_replace=3,
                          routed_scaling_factor=2.5, norm_topk_prob=True, rms_norm_eps=1e-6,
                          rope_interleave=True,
                          rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                                           "original_max_position_embeddings": 4096,
                                           "beta_fast": 32.0, "beta_slow": 1.0,
                                           "mscale": 1.0, "mscale_all_dim": 1.0}),
    # a few hundred MB: the memory test's checkpoint
    "small": dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16,
                  num_key_value_heads=4, intermediate_size=4096, vocab_size=32000,
                  tie_word_embeddings=False, rope_theta=10000.0),
}
MAX_SHARD = 5_000_000_000


def tensors(c):
    """(name, shape) in the order transformers stores them."""
    if c.get("model_type") == "deepseek_v3":
        yield from deepseek_tensors(c)
        return
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    d = h // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * d
    yield "model.embed_tokens.weight", (v, h)
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}"
        yield f"{p}.self_attn.q_proj.weight", (h, h)
        yield f"{p}.self_attn.k_proj.weight", (kv, h)
        yield f"{p}.self_attn.v_proj.weight", (kv, h)
        yield f"{p}.self_attn.o_proj.weight", (h, h)
        yield f"{p}.mlp.gate_proj.weight", (i, h)
        yield f"{p}.mlp.up_proj.weight", (i, h)
        yield f"{p}.mlp.down_proj.weight", (h, i)
        yield f"{p}.input_layernorm.weight", (h,)
        yield f"{p}.post_attention_layernorm.weight", (h,)
    yield "model.norm.weight", (h,)
    if not c["tie_word_embeddings"]:
        yield "lm_head.weight", (v, h)


def deepseek_tensors(c):
    """DeepSeek-V3's tensors: latent attention, dense MLPs, then routed and shared experts."""
    h, v, heads = c["hidden_size"], c["vocab_size"], c["num_attention_heads"]
    qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    kv, q = c["kv_lora_rank"], c["q_lora_rank"]
    yield "model.embed_tokens.weight", (v, h)
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}"
        a = f"{p}.self_attn"
        yield f"{a}.q_a_proj.weight", (q, h)
        yield f"{a}.q_a_layernorm.weight", (q,)
        yield f"{a}.q_b_proj.weight", (heads * qk, q)
        yield f"{a}.kv_a_proj_with_mqa.weight", (kv + c["qk_rope_head_dim"], h)
        yield f"{a}.kv_a_layernorm.weight", (kv,)
        yield f"{a}.kv_b_proj.weight", (heads * (c["qk_nope_head_dim"] + c["v_head_dim"]), kv)
        yield f"{a}.o_proj.weight", (h, heads * c["v_head_dim"])
        mlps = [(f"{p}.mlp", c["intermediate_size"])]
        if l >= c["first_k_dense_replace"]:
            i = c["moe_intermediate_size"]
            yield f"{p}.mlp.gate.weight", (c["n_routed_experts"], h)
            yield f"{p}.mlp.gate.e_score_correction_bias", (c["n_routed_experts"],)
            mlps = [(f"{p}.mlp.experts.{e}", i) for e in range(c["n_routed_experts"])]
            mlps.append((f"{p}.mlp.shared_experts", i * c["n_shared_experts"]))
        for m, i in mlps:
            yield f"{m}.gate_proj.weight", (i, h)
            yield f"{m}.up_proj.weight", (i, h)
            yield f"{m}.down_proj.weight", (h, i)
        yield f"{p}.input_layernorm.weight", (h,)
        yield f"{p}.post_attention_layernorm.weight", (h,)
    yield "model.norm.weight", (h,)
    yield "lm_head.weight", (v, h)


def bf16_bytes(name, shape, rng):
    """The tensor's bf16 bytes, generated 16M values at a time."""
    n = int(np.prod(shape))
    if name.endswith("norm.weight"):
        return np.full(n, 0x3F80, dtype=np.uint16).tobytes()  # 1.0
    out = bytearray()
    for start in range(0, n, 1 << 24):
        x = rng.standard_normal(min(1 << 24, n - start), dtype=np.float32) * np.float32(0.02)
        out += (x.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    return bytes(out)


def shards(c):
    """Tensors grouped into shards of at most MAX_SHARD bytes, in order."""
    groups, current, size = [], [], 0
    for name, shape in tensors(c):
        nbytes = 2 * int(np.prod(shape))
        if current and size + nbytes > MAX_SHARD:
            groups.append(current)
            current, size = [], 0
        current.append((name, shape))
        size += nbytes
    groups.append(current)
    return groups


def write_shard(path, group, rng):
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in group:
        nbytes = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # 8-byte aligned data, as the safetensors writer pads
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, shape in group:
            f.write(bf16_bytes(name, shape, rng))
    return offset


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--experts", type=int, help="routed experts of a MoE shape (default: the model's)")
    args = ap.parse_args()
    c = dict(SHAPES[args.shape])
    if args.experts:
        c["n_routed_experts"] = args.experts
    os.makedirs(args.out, exist_ok=True)
    arch = {"deepseek_v3": "DeepseekV3ForCausalLM"}.get(c.get("model_type"), "LlamaForCausalLM")
    config = {
        "architectures": [arch], "model_type": "llama", "hidden_act": "silu",
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16",
        "bos_token_id": 1, "eos_token_id": 2, "attention_bias": False, "mlp_bias": False,
        "initializer_range": 0.02, **c,
    }
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    rng = np.random.default_rng(args.seed)
    groups = shards(c)
    weight_map, total = {}, 0
    for k, group in enumerate(groups):
        file = f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors"
        total += write_shard(os.path.join(args.out, file), group, rng)
        weight_map.update({name: file for name, _ in group})
        print(f"{file}: {len(group)} tensors", flush=True)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
    print(f"{args.out}: {total / 1e9:.2f} GB of bf16 weights")


if __name__ == "__main__":
    main()
