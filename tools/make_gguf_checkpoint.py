#!/usr/bin/env python3
"""A quantized GGUF of a Llama safetensors checkpoint, written as llama.cpp's converter writes it.

The bf16 checkpoints of tools/make_random_checkpoint.py (Llama-3-8B shape and the others),
or any Llama-architecture checkpoint whose weights are stored bf16, f16 or f32, become one
`.gguf` file with llama.cpp's tensor names (`token_embd`, `blk.N.attn_q`, ...,
`output`), its row permutation of the q and k projections (`LlamaModel.permute` of
convert_hf_to_gguf.py: q by head_count, k by head_count_kv) and its metadata keys
(`llama.block_count`, `llama.attention.head_count_kv`, ...). The 2-D matrices are
quantized by the `gguf` package (`gguf.quants.quantize`, the same numpy code llama.cpp's
converter uses) to Q8_0 or Q4_0; norms stay F32. No tokenizer is written (feed token ids:
`--corpus ids.json`).

Written tensor by tensor (header and tensor infos first, then each tensor's data as it is
quantized), so memory stays near one tensor whatever the model's size.

    python tools/make_gguf_checkpoint.py SRC_DIR OUT.gguf [--type q8_0|q4_0]

Needs numpy and gguf (tools/requirements.txt). The Llama-3-8B shape to Q8_0: ~8.5 GB,
a few minutes on 2 cores.
"""

import argparse
import json
import os
import struct

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

TYPES = {"q8_0": Q.Q8_0, "q4_0": Q.Q4_0}
FILE_TYPES = {"q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0}
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
TOP_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


class Checkpoint:
    """The tensors of a safetensors checkpoint (one file or an index of shards), read as
    float32 one at a time from memory maps."""

    def __init__(self, src):
        index = os.path.join(src, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        else:
            files = ["model.safetensors"]
        self.where = {}
        for name in files:
            path = os.path.join(src, name)
            with open(path, "rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(n))
            data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
            for key, info in header.items():
                if key != "__metadata__":
                    self.where[key] = (data, info)

    def names(self):
        return sorted(self.where)

    def shape(self, name):
        return self.where[name][1]["shape"]

    def get(self, name):
        data, info = self.where[name]
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        kind = info["dtype"]
        if kind == "BF16":
            values = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif kind == "F16":
            values = raw.view(np.float16).astype(np.float32)
        elif kind == "F32":
            values = np.array(raw.view(np.float32))
        else:
            raise SystemExit(f"{name}: dtype {kind} is not bf16, f16 or f32")
        return values.reshape(info["shape"])


def permute(w, heads):
    """llama.cpp's `LlamaModel.permute`: each head's rows from rotate-half to interleaved."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_name(name):
    if name in TOP_NAMES:
        return TOP_NAMES[name]
    parts = name.split(".")
    if parts[:2] == ["model", "layers"]:
        rest = ".".join(parts[3:])
        if rest in LAYER_NAMES:
            return f"blk.{parts[2]}.{LAYER_NAMES[rest]}"
    raise SystemExit(f"{name}: not a Llama tensor this tool maps")


def converted(ck, name, c):
    """The tensor as llama.cpp stores it, in float32 (before quantization)."""
    w = ck.get(name)
    heads, kv = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    if name.endswith("self_attn.q_proj.weight"):
        w = permute(w, heads)
    elif name.endswith("self_attn.k_proj.weight"):
        w = permute(w, kv)
    return np.ascontiguousarray(w, dtype=np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--type", choices=sorted(TYPES), default="q8_0")
    args = ap.parse_args()
    with open(os.path.join(args.src, "config.json")) as f:
        c = json.load(f)
    if c.get("model_type") != "llama":
        raise SystemExit(f"{args.src}: model_type {c.get('model_type')!r}; this tool writes llama")
    ck = Checkpoint(args.src)
    qtype = TYPES[args.type]
    heads = c["num_attention_heads"]
    head_dim = c.get("head_dim", c["hidden_size"] // heads)

    w = gguf.GGUFWriter(args.out, "llama")
    w.add_name(os.path.basename(os.path.normpath(args.src)))
    w.add_context_length(c.get("max_position_embeddings", 8192))
    w.add_embedding_length(c["hidden_size"])
    w.add_block_count(c["num_hidden_layers"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(c.get("num_key_value_heads", heads))
    w.add_rope_freq_base(float(c.get("rope_theta", 10000.0)))
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(float(c.get("rms_norm_eps", 1e-5)))
    w.add_vocab_size(c["vocab_size"])
    w.add_file_type(FILE_TYPES[args.type])
    plan = []
    layers = c["num_hidden_layers"]
    for name in ck.names():
        parts = name.split(".")
        if parts[:2] == ["model", "layers"] and int(parts[2]) >= layers:
            continue  # stored, but past the config's layers
        shape = ck.shape(name)
        # matrices whose rows are whole quantization blocks are quantized; norms stay F32
        block = gguf.GGML_QUANT_SIZES[qtype][0]
        kind = qtype if len(shape) == 2 and shape[1] % block == 0 else Q.F32
        plan.append((name, kind))
        stored = gguf.quant_shape_to_byte_shape(shape, kind) if kind != Q.F32 else shape
        nbytes = int(np.prod(stored)) * (1 if kind != Q.F32 else 4)
        w.add_tensor_info(gguf_name(name), stored, np.uint8 if kind != Q.F32 else np.float32,
                          nbytes, raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for i, (name, kind) in enumerate(plan):
        x = converted(ck, name, c)
        w.write_tensor_data(gguf.quants.quantize(x, kind) if kind != Q.F32 else x)
        print(f"[{i + 1}/{len(plan)}] {gguf_name(name)} {list(x.shape)} {kind.name}", flush=True)
    w.close()
    print(f"wrote {args.out}: {os.path.getsize(args.out) / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
