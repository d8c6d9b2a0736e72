"""GGUF files of the 2026 families (issue 52), written from the tiny transformers checkpoints
under tests/fixtures/models/ the way llama.cpp's `convert_hf_to_gguf.py` writes them, so that
each must reproduce its checkpoint's float64 reference (tests/fixtures/reference/<name>.*).

What each converter class does (llama.cpp master, November 2026) is restated per family below,
beside the inverse this script applies to read the file back: every written file is read back
with the `gguf` package's own reader, the converter's changes undone here, and compared with
the checkpoint's tensors exactly; where transformers has a GGUF loader for the architecture
(lfm2), the file is also loaded with it and its logits compared with the checkpoint's.

Run:  /tmp/asa-py-venv/bin/python tools/make_gguf_2026_fixtures.py [name ...]
Deterministic: two runs write byte-identical files.
"""

import json
import os
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import make_fixtures as mf  # noqa: E402  (checkpoint paths, state loading)
from smollm2 import GGUF_FIX, finish_gguf  # noqa: E402

import gguf  # noqa: E402


def log(msg):
    print(f"make_gguf_2026_fixtures: {msg}", flush=True)


def checkpoint(name):
    src = os.path.join(mf.MODELS, name)
    cfg = json.load(open(os.path.join(src, "config.json")))
    sd = {k: v.to(torch.float32).numpy() for k, v in mf.load_state(src).items()}
    return src, cfg, sd


def name_map(arch, cfg, extra_layers=0):
    arch_id = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch)
    return gguf.get_tensor_name_map(arch_id, cfg["num_hidden_layers"] + extra_layers)


def gguf_name(names, key):
    base, kind = key.rsplit(".", 1)
    mapped = names.get_name(base)
    assert mapped is not None, key
    return f"{mapped}.{kind}"


def read_back(path):
    """The file's tensors as the `gguf` package reads them (numpy float32, numpy order)."""
    reader = gguf.GGUFReader(path)
    out = {}
    for t in reader.tensors:
        x = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        out[t.name] = x.reshape([int(d) for d in reversed(t.shape)])
    return reader, out


def check_exact(name, want, got):
    assert sorted(want) == sorted(got), set(want) ^ set(got)
    for k in want:
        assert want[k].shape == got[k].shape, (k, want[k].shape, got[k].shape)
        assert np.array_equal(want[k], got[k]), (k, np.abs(want[k] - got[k]).max())
    log(f"{name}.gguf: {len(want)} tensors read back to the checkpoint's exactly")


def common_keys(w, cfg, ffn):
    w.add_name("asa-analyze fixture")
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(ffn)
    w.add_head_count(cfg["num_attention_heads"])
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)


# --- LFM2 ------------------------------------------------------------------------------
# LFM2Model: Llama's keys; `attention.head_count_kv` one value per layer, 0 where
# layer_types says "conv"; `shortconv.l_cache` = conv_L_cache; `feed_forward_length` the
# width after block_auto_adjust_ff_dim (2/3, times the multiplier, rounded up to
# block_multiple_of); `conv.conv.weight` squeezed [d, 1, L] -> [d, L]; names by the gguf
# package's table (embedding_norm -> token_embd_norm); no q/k permutation, no norm offset.


def lfm2_width(cfg):
    ff = int(2 * cfg["intermediate_size"] / 3)
    ff = int(cfg.get("block_ffn_dim_multiplier", 1.0) * ff)
    of = cfg.get("block_multiple_of", 256)
    return of * ((ff + of - 1) // of)


def write_lfm2(name="lfm2"):
    src, cfg, sd = checkpoint(name)
    names = name_map("lfm2", cfg)
    path = os.path.join(GGUF_FIX, f"{name}.gguf")
    w = gguf.GGUFWriter(path, "lfm2")
    common_keys(w, cfg, lfm2_width(cfg))
    w.add_head_count_kv([0 if t == "conv" else cfg["num_key_value_heads"] for t in cfg["layer_types"]])
    w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["norm_eps"])
    w.add_shortconv_l_cache(cfg["conv_L_cache"])
    for key in sorted(sd):
        x = sd[key]
        if key.endswith("conv.conv.weight"):
            x = x.squeeze(1)
        w.add_tensor(gguf_name(names, key), np.ascontiguousarray(x))
    finish_gguf(w)
    assert sd["model.layers.0.feed_forward.w1.weight"].shape[0] == lfm2_width(cfg)
    _, back = read_back(path)
    undone = {}
    for key in sd:
        x = back[gguf_name(names, key)]
        undone[key] = np.expand_dims(x, 1) if key.endswith("conv.conv.weight") else x
    check_exact(name, sd, undone)
    # transformers' own LFM2 GGUF loader reads the same file to the same model
    from transformers import Lfm2ForCausalLM

    ids = torch.tensor([[1, 5, 9, 3, 7, 11, 20, 30, 2, 4]])
    want = Lfm2ForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    config = Lfm2ForCausalLM.config_class.from_pretrained(src)
    got = Lfm2ForCausalLM.from_pretrained(GGUF_FIX, gguf_file=f"{name}.gguf", config=config, dtype=torch.float32).eval()
    a, b = want.state_dict(), got.state_dict()
    assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a), "tensors differ"
    with torch.no_grad():
        d = (want(input_ids=ids).logits - got(input_ids=ids).logits).abs().max().item()
    assert d < 1e-5, d
    log(f"{name}.gguf: transformers' GGUF loader reads the checkpoint's tensors exactly (logits {d:.1e})")


WRITERS = {"lfm2": write_lfm2}


def main(argv):
    names = argv or list(WRITERS)
    for name in names:
        if name not in WRITERS:
            sys.exit(f"unknown fixture {name!r} (fixtures: {', '.join(WRITERS)})")
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    for name in names:
        WRITERS[name]()


if __name__ == "__main__":
    main(sys.argv[1:])
