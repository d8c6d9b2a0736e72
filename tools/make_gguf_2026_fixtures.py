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
    """The converter's `map_tensor_name`: the whole name first (Mamba's `A_log`, Falcon-H1's
    `pre_ff_layernorm.weight` map without a suffix), else with `.weight` / `.bias`."""
    mapped = names.get_name(key, try_suffixes=(".weight", ".bias"))
    assert mapped is not None, key
    return mapped


def llama_permute(w, n_head):
    """convert_hf_to_gguf.py LlamaModel.permute."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama_unpermute(w, n_head):
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


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


def common_keys(w, cfg, ffn, context=None):
    w.add_name("asa-analyze fixture")
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(context or cfg["max_position_embeddings"])
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


# --- Mamba-2 (Mamba2Model.modify_tensors, for Granite 4 hybrid and Falcon-H1) -----------
# `dt_bias` renamed `dt_proj.bias` (-> ssm_dt.bias); conv1d squeezed to [channels, K]; A_log
# and D reshaped to [heads, 1], A_log stored as A = -exp(A_log) (in f32); the norm reshaped to
# [groups, inner / groups]; `ssm.*` keys: conv_kernel, inner_size, state_size,
# time_step_rank (the number of heads), group_count.


def mamba2_tensor(key, x, cfg, inner):
    """(HF name as the converter maps it, tensor as it writes it) for a Mamba tensor."""
    if key.endswith(".dt_bias"):
        key = key[: -len(".dt_bias")] + ".dt_proj.bias"
    if key.endswith("conv1d.weight"):
        x = x.squeeze()
    elif key.endswith((".A_log", ".D")):
        x = x.reshape(*x.shape, 1)
    elif key.endswith("mamba.norm.weight"):
        x = x.reshape(cfg["mamba_n_groups"], inner // cfg["mamba_n_groups"])
    if key.endswith(".A_log"):
        x = -np.exp(x.astype(np.float32))
    return key, x


def mamba2_undo(key, x):
    """The inverse, to the checkpoint's tensor under its HF name."""
    if key.endswith("conv1d.weight"):
        return np.expand_dims(x, 1)
    if key.endswith(".A_log"):
        return np.log(-x).reshape(-1)
    if key.endswith((".D", "mamba.norm.weight")):
        return x.reshape(-1)
    return x


def mamba2_keys(w, cfg, inner):
    w.add_ssm_conv_kernel(cfg["mamba_d_conv"])
    w.add_ssm_inner_size(inner)
    w.add_ssm_state_size(cfg["mamba_d_state"])
    w.add_ssm_time_step_rank(cfg["mamba_n_heads"])
    w.add_ssm_group_count(cfg["mamba_n_groups"])


# --- Granite 4 hybrid ------------------------------------------------------------------
# GraniteHybridModel(Mamba2Model, GraniteMoeModel): attention layers are layer_types'
# "attention" (the hub's name; a transformers-5 config says "full_attention", read as such
# here); head_count_kv per layer, 0 on Mamba layers; context_length 2**20 for the NoPE
# hybrid; head_dim popped (rope.dimension_count = hidden / heads, no key_length);
# attention.scale, embedding_scale, residual_scale, logit_scale from the four multipliers;
# rope.scaling.finetuned false (not Bamba); expert_count, expert_used_count,
# expert_shared_feed_forward_length; q and k permuted as LlamaModel's (q with heads, k with
# kv heads) even though NoPE; input_linear split in halves along the rows into
# ffn_gate_exps / ffn_up_exps, output_linear -> ffn_down_exps, router -> ffn_gate_inp, the
# shared MLP's input_linear split into ffn_gate_shexp / ffn_up_shexp.


def write_granitehybrid(name="granitemoehybrid"):
    src, cfg, sd = checkpoint(name)
    names = name_map("granitehybrid", cfg)
    path = os.path.join(GGUF_FIX, f"{name}.gguf")
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hidden = cfg["hidden_size"]
    inner = int(cfg["mamba_expand"] * hidden)
    attention = [t == "full_attention" for t in cfg["layer_types"]]
    w = gguf.GGUFWriter(path, "granitehybrid")
    # context_length: 2**20 over max_position_embeddings, as the converter overwrites it
    common_keys(w, cfg, cfg["intermediate_size"], context=2**20)
    w.add_head_count_kv([kv if a else 0 for a in attention])
    w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_expert_count(cfg["num_local_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_rope_dimension_count(hidden // heads)
    w.add_attention_scale(cfg["attention_multiplier"])
    w.add_embedding_scale(cfg["embedding_multiplier"])
    w.add_residual_scale(cfg["residual_multiplier"])
    w.add_logit_scale(cfg["logits_scaling"])
    w.add_expert_shared_feed_forward_length(cfg["shared_intermediate_size"])
    mamba2_keys(w, cfg, inner)
    w.add_rope_scaling_finetuned(False)
    written = {}
    ff, shared = cfg["intermediate_size"], cfg["shared_intermediate_size"]
    for key in sorted(sd):
        x = sd[key]
        parts = []
        if "input_linear" in key:
            half = shared if "shared_mlp" in key else ff
            gate, up = x[..., :half, :], x[..., half:, :]
            which = ("ffn_gate_shexp", "ffn_up_shexp") if "shared_mlp" in key else ("ffn_gate_exps", "ffn_up_exps")
            layer = key.split(".")[2]
            parts = [(f"blk.{layer}.{which[0]}.weight", gate), (f"blk.{layer}.{which[1]}.weight", up)]
        elif ".mamba." in key:
            mkey, mx = mamba2_tensor(key, x, cfg, inner)
            parts = [(gguf_name(names, mkey), mx)]
        elif key.endswith("self_attn.q_proj.weight"):
            parts = [(gguf_name(names, key), llama_permute(x, heads))]
        elif key.endswith("self_attn.k_proj.weight"):
            parts = [(gguf_name(names, key), llama_permute(x, kv))]
        else:
            parts = [(gguf_name(names, key), x)]
        for gname, gx in parts:
            w.add_tensor(gname, np.ascontiguousarray(gx.astype(np.float32)))
            written[gname] = key
    finish_gguf(w)
    _, back = read_back(path)
    undone = {}
    for gname, key in written.items():
        x = back[gname]
        if "input_linear" in key:
            if key in undone:
                continue
            layer = key.split(".")[2]
            which = ("ffn_gate_shexp", "ffn_up_shexp") if "shared_mlp" in key else ("ffn_gate_exps", "ffn_up_exps")
            x = np.concatenate([back[f"blk.{layer}.{which[0]}.weight"], back[f"blk.{layer}.{which[1]}.weight"]], axis=-2)
        elif ".mamba." in key:
            x = mamba2_undo(key, x)
        elif key.endswith("self_attn.q_proj.weight"):
            x = llama_unpermute(x, heads)
        elif key.endswith("self_attn.k_proj.weight"):
            x = llama_unpermute(x, kv)
        undone[key] = x
    # A = -exp(A_log) in f32 and back: within an ulp of the checkpoint's A_log
    for key in [k for k in sd if k.endswith(".A_log")]:
        assert np.allclose(undone[key], sd[key], rtol=4e-7, atol=4e-7), key
        undone[key] = sd[key]
    check_exact(name, sd, undone)


# --- Falcon-H1 -------------------------------------------------------------------------
# FalconH1Model(Mamba2Model): head_count_kv one value (every layer has attention and
# Mamba-2); key_length / value_length = head_dim; ssm.inner_size = mamba_d_ssm,
# time_step_rank = mamba_d_ssm / mamba_d_head; no multiplier key: every muP multiplier is
# multiplied into the weights (q x attention_in; k x key x attention_in; v x attention_in;
# o x attention_out; mamba out_proj x ssm_out; in_proj x ssm_in, then its z, x, B, C, dt
# rows x ssm_multipliers[0..4]; MLP gate x mlp_multipliers[0], down x mlp_multipliers[1];
# lm_head x lm_head_multiplier; the embeddings x embedding_multiplier), in float32; no
# q/k permutation; `pre_ff_layernorm.weight` -> `blk.N.ffn_norm` (no suffix).


def falcon_h1_baked(key, x, cfg):
    """The tensor times the multipliers the converter multiplies into it."""
    x = x.astype(np.float32)
    f32 = np.float32
    if "down_proj" in key:
        return x * f32(cfg["mlp_multipliers"][1])
    if "gate_proj" in key:
        return x * f32(cfg["mlp_multipliers"][0])
    if "k_proj" in key:
        return x * f32(cfg["key_multiplier"]) * f32(cfg["attention_in_multiplier"])
    if "q_proj" in key or "v_proj" in key:
        return x * f32(cfg["attention_in_multiplier"])
    if "o_proj" in key:
        return x * f32(cfg["attention_out_multiplier"])
    if "out_proj" in key:
        return x * f32(cfg["ssm_out_multiplier"])
    if "in_proj" in key:
        x = x * f32(cfg["ssm_in_multiplier"])
        di, gn = cfg["mamba_d_ssm"], cfg["mamba_n_groups"] * cfg["mamba_d_state"]
        m = [f32(v) for v in cfg["ssm_multipliers"]]
        x[:di] *= m[0]
        x[di:2 * di] *= m[1]
        x[2 * di:2 * di + gn] *= m[2]
        x[2 * di + gn:2 * di + 2 * gn] *= m[3]
        x[2 * di + 2 * gn:] *= m[4]
        return x
    if "lm_head" in key:
        return x * f32(cfg["lm_head_multiplier"])
    if "embed_tokens" in key:
        return x * f32(cfg["embedding_multiplier"])
    return x


def write_falcon_h1(name="falcon_h1"):
    src, cfg, sd = checkpoint(name)
    names = name_map("falcon-h1", cfg)
    path = os.path.join(GGUF_FIX, f"{name}.gguf")
    inner = cfg["mamba_d_ssm"]
    assert not cfg["attention_bias"] and not cfg["mamba_rms_norm"]
    w = gguf.GGUFWriter(path, "falcon-h1")
    common_keys(w, cfg, cfg["intermediate_size"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    mamba2_keys(w, cfg, inner)
    written = {}
    baked = {}
    for key in sorted(sd):
        x = falcon_h1_baked(key, sd[key], cfg)
        baked[key] = x
        mkey, x = mamba2_tensor(key, x, cfg, inner) if ".mamba." in key else (key, x)
        gname = gguf_name(names, mkey)
        w.add_tensor(gname, np.ascontiguousarray(x.astype(np.float32)))
        written[gname] = key
    finish_gguf(w)
    assert "blk.0.ffn_norm" in written, sorted(written)
    _, back = read_back(path)
    undone = {key: mamba2_undo(key, back[g]) if ".mamba." in key else back[g] for g, key in written.items()}
    for key in [k for k in sd if k.endswith(".A_log")]:
        assert np.allclose(undone[key], baked[key], rtol=4e-7, atol=4e-7), key
        undone[key] = baked[key]
    # the file holds the products: the checkpoint's weights times their multipliers
    check_exact(name, baked, undone)
    # the products with every multiplier 1 are the checkpoint's model: transformers' own
    # forward of the baked weights gives the checkpoint's logits
    from transformers import FalconH1ForCausalLM

    ones = dict(embedding_multiplier=1.0, lm_head_multiplier=1.0, attention_in_multiplier=1.0,
                attention_out_multiplier=1.0, key_multiplier=1.0, ssm_in_multiplier=1.0,
                ssm_out_multiplier=1.0, mlp_multipliers=[1.0, 1.0], ssm_multipliers=[1.0] * 5)
    want = FalconH1ForCausalLM.from_pretrained(src, dtype=torch.float64).eval()
    got = FalconH1ForCausalLM(FalconH1ForCausalLM.config_class.from_pretrained(src, **ones)).to(torch.float64).eval()
    got.load_state_dict({k: torch.from_numpy(v).to(torch.float64) for k, v in baked.items()}, strict=True)
    ids = torch.tensor([[1, 5, 9, 3, 7, 11, 20, 30, 2, 4]])
    with torch.no_grad():
        d = (want(input_ids=ids).logits - got(input_ids=ids).logits).abs().max().item()
    assert d < 1e-5, d
    log(f"{name}.gguf: the baked weights with every multiplier 1 give the checkpoint's logits (float64, {d:.1e})")


# --- DeepSeek-style experts (DeepseekV2Model, Glm4MoeModel) ------------------------------
# mlp.experts.{e}.{gate,up,down}_proj stacked over e = 0..E-1 (torch.stack(dim=0)) into
# ffn_{gate,up,down}_exps; the router -> ffn_gate_inp; e_score_correction_bias ->
# exp_probs_b.bias; the shared experts -> ffn_{gate,up,down}_shexp.


def stack_experts(sd, layers, experts):
    """The checkpoint with each MoE layer's experts stacked as the converter stacks them,
    and the inverse check's map back."""
    out = {}
    for key, x in sd.items():
        if ".mlp.experts." not in key:
            out[key] = x
    for layer in layers:
        for proj in ("gate_proj", "up_proj", "down_proj"):
            keys = [f"model.layers.{layer}.mlp.experts.{e}.{proj}.weight" for e in range(experts)]
            if keys[0] in sd:
                out[f"stacked.{layer}.{proj}"] = np.stack([sd[k] for k in keys])
    return out


EXPS = {"gate_proj": "ffn_gate_exps", "up_proj": "ffn_up_exps", "down_proj": "ffn_down_exps"}


def moe_tensor_name(names, key):
    if key.startswith("stacked."):
        _, layer, proj = key.split(".")
        return f"blk.{layer}.{EXPS[proj]}.weight"
    if key.endswith("e_score_correction_bias"):
        return f"blk.{key.split('.')[2]}.exp_probs_b.bias"
    return gguf_name(names, key)


def unstack(back, written, experts):
    """The file's tensors back under the checkpoint's names, experts unstacked."""
    undone = {}
    for gname, key in written.items():
        x = back[gname]
        if key.startswith("stacked."):
            _, layer, proj = key.split(".")
            for e in range(experts):
                undone[f"model.layers.{layer}.mlp.experts.{e}.{proj}.weight"] = x[e]
        else:
            undone[key] = x
    return undone


# --- GLM-4.5 ---------------------------------------------------------------------------
# Glm4MoeModel(TextModel): block_count = num_hidden_layers + num_nextn_predict_layers and
# nextn_predict_layers (the MTP layer a full blk.N plus blk.N.nextn.*; transformers 5.24 saves
# no MTP weights, so this fixture writes a stand-in block 3: block 2's tensors and the nextn
# ones, which a reader must skip); key_length = value_length = head_dim;
# rope.dimension_count = head_dim x partial_rotary_factor; expert_count, expert_used_count,
# expert_group_count, expert_group_used_count, expert_feed_forward_length,
# expert_shared_count, leading_dense_block_count, expert_gating_func 2 (sigmoid, always),
# expert_weights_scale, expert_weights_norm; no vocab_size key; post_attention_layernorm ->
# post_attention_norm; no q/k permutation.


def write_glm4_moe(name="glm4_moe"):
    src, cfg, sd = checkpoint(name)
    layers, nextn = cfg["num_hidden_layers"], cfg["num_nextn_predict_layers"]
    names = name_map("glm4moe", cfg, extra_layers=nextn)
    path = os.path.join(GGUF_FIX, f"{name}.gguf")
    hd = cfg["head_dim"]
    w = gguf.GGUFWriter(path, "glm4moe")
    w.add_name("asa-analyze fixture")
    w.add_block_count(layers + nextn)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(int(hd * cfg["rope_parameters"]["partial_rotary_factor"]))
    w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_expert_count(cfg["n_routed_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_expert_group_count(cfg["n_group"])
    w.add_expert_group_used_count(cfg["topk_group"])
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_expert_shared_count(cfg["n_shared_experts"])
    w.add_leading_dense_block_count(cfg["first_k_dense_replace"])
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_expert_weights_scale(cfg["routed_scaling_factor"])
    w.add_expert_weights_norm(cfg["norm_topk_prob"])
    w.add_nextn_predict_layers(nextn)
    stacked = stack_experts(sd, range(layers), cfg["n_routed_experts"])
    written = {}
    for key in sorted(stacked):
        gname = moe_tensor_name(names, key)
        w.add_tensor(gname, np.ascontiguousarray(stacked[key]))
        written[gname] = key
    # the stand-in MTP block: block 2's tensors again, and the nextn tensors
    rng = np.random.default_rng(52)
    d, vocab = cfg["hidden_size"], cfg["vocab_size"]
    mtp = {g.replace(f"blk.{layers - 1}.", f"blk.{layers}."): stacked[k]
           for g, k in written.items() if g.startswith(f"blk.{layers - 1}.")}
    mtp.update({f"blk.{layers}.nextn.eh_proj.weight": rng.standard_normal((d, 2 * d), dtype=np.float32),
                f"blk.{layers}.nextn.enorm.weight": np.ones(d, np.float32),
                f"blk.{layers}.nextn.hnorm.weight": np.ones(d, np.float32),
                f"blk.{layers}.nextn.shared_head_norm.weight": np.ones(d, np.float32),
                f"blk.{layers}.nextn.embed_tokens.weight": rng.standard_normal((vocab, d), dtype=np.float32)})
    for gname in sorted(mtp):
        w.add_tensor(gname, np.ascontiguousarray(mtp[gname]))
    finish_gguf(w)
    _, back = read_back(path)
    assert sorted(back) == sorted(list(written) + list(mtp))
    check_exact(name, sd, unstack(back, written, cfg["n_routed_experts"]))


# --- DeepSeek-V3 -----------------------------------------------------------------------
# DeepseekV2Model(TextModel), arch deepseek2: head_count_kv forced 1; key_length =
# kv_lora_rank + qk_rope_head_dim, value_length = kv_lora_rank (MLA absorbed into MQA);
# key_length_mla = nope + rope, value_length_mla = v_head_dim; q_lora_rank (if not None),
# kv_lora_rank; rope.dimension_count = qk_rope_head_dim; yarn: rope.scaling.type, factor,
# original_context_length, yarn_log_multiplier = 0.1 x mscale_all_dim; the MoE keys
# (expert_weights_norm only when true; expert_gating_func from scoring_func, which the hub's
# config.json has ("sigmoid" -> 2) and a transformers-5 config lacks: written as the hub's
# here); kv_b_proj [H * (nope + v), r] viewed per head and split: attn_k_b = k_b transposed
# [H, r, nope], attn_v_b [H, v, r]; MTP layers dropped; no permutation (llama.cpp's NORM
# rope on consecutive pairs is DeepSeek's interleaved layout).


def write_deepseek_v3(name="deepseek_v3"):
    src, cfg, sd = checkpoint(name)
    names = name_map("deepseek2", cfg)
    path = os.path.join(GGUF_FIX, f"{name}.gguf")
    heads, r = cfg["num_attention_heads"], cfg["kv_lora_rank"]
    nope, rope, v = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    rp = cfg["rope_parameters"]
    w = gguf.GGUFWriter(path, "deepseek2")
    common_keys(w, cfg, cfg["intermediate_size"])
    w.add_head_count_kv(1)
    w.add_key_length(r + rope)
    w.add_value_length(r)
    w.add_key_length_mla(nope + rope)
    w.add_value_length_mla(v)
    w.add_q_lora_rank(cfg["q_lora_rank"])
    w.add_kv_lora_rank(r)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_dimension_count(rope)
    w.add_rope_freq_base(rp["rope_theta"])
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(rp["factor"])
    w.add_rope_scaling_orig_ctx_len(rp["original_max_position_embeddings"])
    w.add_rope_scaling_yarn_log_mul(0.1 * rp["mscale_all_dim"])
    assert rp["mscale"] == rp["mscale_all_dim"]  # llama.cpp's assumption
    w.add_leading_dense_block_count(cfg["first_k_dense_replace"])
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_expert_count(cfg["n_routed_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_expert_shared_count(cfg["n_shared_experts"])
    w.add_expert_group_count(cfg["n_group"])
    w.add_expert_group_used_count(cfg["topk_group"])
    w.add_expert_weights_scale(cfg["routed_scaling_factor"])
    if cfg["norm_topk_prob"]:
        w.add_expert_weights_norm(True)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    stacked = stack_experts(sd, range(cfg["num_hidden_layers"]), cfg["n_routed_experts"])
    written = {}
    for key in sorted(stacked):
        x = stacked[key]
        if key.endswith("kv_b_proj.weight"):
            kv_b = x.reshape(heads, nope + v, r)
            k_b, v_b = kv_b[:, :nope], kv_b[:, nope:]
            layer = key.split(".")[2]
            for role, part in (("attn_k_b", k_b.transpose(0, 2, 1)), ("attn_v_b", v_b)):
                w.add_tensor(f"blk.{layer}.{role}.weight", np.ascontiguousarray(part))
                written[f"blk.{layer}.{role}.weight"] = key
            continue
        gname = moe_tensor_name(names, key)
        w.add_tensor(gname, np.ascontiguousarray(x))
        written[gname] = key
    finish_gguf(w)
    _, back = read_back(path)
    plain = {g: k for g, k in written.items() if not k.endswith("kv_b_proj.weight")}
    undone = unstack(back, plain, cfg["n_routed_experts"])
    for layer in range(cfg["num_hidden_layers"]):
        k_b, v_b = back[f"blk.{layer}.attn_k_b.weight"], back[f"blk.{layer}.attn_v_b.weight"]
        kv_b = np.concatenate([k_b.transpose(0, 2, 1), v_b], axis=1).reshape(heads * (nope + v), r)
        undone[f"model.layers.{layer}.self_attn.kv_b_proj.weight"] = kv_b
    check_exact(name, sd, undone)


# --- Qwen3-Next ------------------------------------------------------------------------
# Qwen3NextModel(Qwen2MoeModel): A_log -> ssm_a = -exp(A_log); dt_bias -> dt_proj.bias
# (ssm_dt.bias); conv1d squeezed; every *norm.weight but linear_attn.norm.weight + 1 (the
# zero-centred RMSNorm folded); in_proj_qkvz [per key head g: q_g, k_g, v_g, z_g] split into
# attn_qkv [all q | all k | all v] and attn_gate [all z]; q_proj (query and gate interleaved
# per head) as it is; experts stacked; shared_expert_gate -> ffn_gate_inp_shexp; keys
# ssm.conv_kernel, state_size (linear_key_head_dim), group_count (linear_num_key_heads),
# time_step_rank (linear_num_value_heads), inner_size, full_attention_interval,
# rope.dimension_count = head_dim x partial_rotary_factor, expert_feed_forward_length,
# expert_shared_feed_forward_length; no q/k permutation. This checkpoint's dense layer 0
# (mlp_only_layers [0], which llama.cpp's qwen3next loader does not build) is written as
# ffn_gate / ffn_up / ffn_down, the names every llama.cpp architecture gives a dense MLP.


def qkvz_split(x, cfg):
    """convert_hf_to_gguf.py's split of in_proj_qkvz (numpy)."""
    nk, dk = cfg["linear_num_key_heads"], cfg["linear_key_head_dim"]
    rv = cfg["linear_num_value_heads"] // nk * cfg["linear_value_head_dim"]
    grouped = x.reshape(nk, 2 * dk + 2 * rv, x.shape[1])
    q, k, v, z = np.split(grouped, [dk, 2 * dk, 2 * dk + rv], axis=1)
    flat = lambda t: t.reshape(-1, x.shape[1])  # noqa: E731
    return np.concatenate([flat(q), flat(k), flat(v)]), flat(z)


def qkvz_join(qkv, z, cfg):
    nk, dk = cfg["linear_num_key_heads"], cfg["linear_key_head_dim"]
    qk, h = nk * dk, qkv.shape[1]
    parts = [qkv[:qk], qkv[qk:2 * qk], qkv[2 * qk:], z]
    return np.concatenate([p.reshape(nk, -1, h) for p in parts], axis=1).reshape(-1, h)


def write_qwen3_next(name="qwen3_next"):
    src, cfg, sd = checkpoint(name)
    names = name_map("qwen3next", cfg)
    path = os.path.join(GGUF_FIX, f"{name}.gguf")
    layers, types = cfg["num_hidden_layers"], cfg["layer_types"]
    attention = [l for l, t in enumerate(types) if t == "full_attention"]
    interval = attention[0] + 1
    assert attention == [l for l in range(layers) if (l + 1) % interval == 0]
    hd = cfg["head_dim"]
    w = gguf.GGUFWriter(path, "qwen3next")
    common_keys(w, cfg, cfg["intermediate_size"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_expert_count(cfg["num_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
    w.add_ssm_conv_kernel(cfg["linear_conv_kernel_dim"])
    w.add_ssm_state_size(cfg["linear_key_head_dim"])
    w.add_ssm_group_count(cfg["linear_num_key_heads"])
    w.add_ssm_time_step_rank(cfg["linear_num_value_heads"])
    w.add_ssm_inner_size(cfg["linear_value_head_dim"] * cfg["linear_num_value_heads"])
    w.add_full_attention_interval(interval)
    # as llama.cpp's converter writes it from layer_types: a boolean per layer (true: linear
    # attention), beside the interval
    types = cfg.get("layer_types") or [
        "full_attention" if (l + 1) % interval == 0 else "linear_attention" for l in range(layers)
    ]
    w.add_array("qwen3next.attention.recurrent_layers", [t == "linear_attention" for t in types])
    w.add_rope_dimension_count(int(hd * cfg["rope_parameters"]["partial_rotary_factor"]))
    stacked = stack_experts(sd, range(layers), cfg["num_experts"])
    written = {}

    def add(gname, x, key):
        w.add_tensor(gname, np.ascontiguousarray(x.astype(np.float32)))
        written[gname] = key

    dense = {"gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}
    for key in sorted(stacked):
        x = stacked[key]
        layer = key.split(".")[2] if key.startswith("model.layers.") else None
        if key.endswith("in_proj_qkvz.weight"):
            qkv, z = qkvz_split(x, cfg)
            add(f"blk.{layer}.attn_qkv.weight", qkv, key)
            add(f"blk.{layer}.attn_gate.weight", z, key)
            continue
        if key.endswith(".A_log"):
            x = -np.exp(x)
        elif key.endswith(".dt_bias"):
            key = key[: -len(".dt_bias")] + ".dt_proj.bias"
        elif "conv1d" in key:
            x = x.squeeze()
        elif key.endswith("norm.weight") and not key.endswith("linear_attn.norm.weight"):
            x = x + np.float32(1)
        proj = key.split(".")[-2]
        if ".mlp." in key and proj in dense and ".shared_expert." not in key and not key.startswith("stacked."):
            add(f"blk.{layer}.{dense[proj]}.weight", x, key)
        else:
            add(moe_tensor_name(names, key), x, key)
    finish_gguf(w)
    _, back = read_back(path)
    undone = {}
    for gname, key in written.items():
        x = back[gname]
        if key.endswith("in_proj_qkvz.weight"):
            layer = key.split(".")[2]
            x = qkvz_join(back[f"blk.{layer}.attn_qkv.weight"], back[f"blk.{layer}.attn_gate.weight"], cfg)
        elif key.endswith(".A_log"):
            x = np.log(-x)
        elif key.endswith(".dt_proj.bias"):
            key = key[: -len(".dt_proj.bias")] + ".dt_bias"
        elif "conv1d" in key:
            x = np.expand_dims(x, 1)
        elif key.endswith("norm.weight") and not key.endswith("linear_attn.norm.weight"):
            x = x - np.float32(1)
        undone[key] = x
    undone = unstack({k: v for k, v in undone.items()}, {k: k for k in undone}, cfg["num_experts"])
    # -exp then log, and 1 + w then - 1, in f32: within a few ulps of the checkpoint's values
    for key in sd:
        if key.endswith((".A_log", "norm.weight")):
            assert np.allclose(undone[key], sd[key], rtol=1e-6, atol=2e-7), key
            undone[key] = sd[key]
    check_exact(name, sd, undone)


# --- Llama 4 ---------------------------------------------------------------------------
# Llama4Model(LlamaModel), undo_permute False (llama.cpp's NORM RoPE is Llama 4's pairs):
# feed_forward_length = intermediate_size_mlp (dense layers), expert_feed_forward_length =
# intermediate_size (experts and shared expert), interleave_moe_layer_step, key_length /
# value_length / rope.dimension_count = head_dim; gate_up_proj [E, H, 2F] transposed and
# split into ffn_gate_exps / ffn_up_exps [E, F, H]; down_proj [E, F, H] transposed into
# ffn_down_exps [E, H, F]; router -> ffn_gate_inp; shared expert -> ffn_*_shexp. No key for
# the chunk size, NoPE layers, temperature tuning or QK-norm: llama.cpp's loader fixes chunks
# of 8192, every 4th layer NoPE, floor 8192 and scale 0.1, QK-norm unless 128 experts. This
# checkpoint has chunks of 8, floor 4 and scale 0.5, so the file is another model than the
# checkpoint: the one llama.cpp runs, whose float64 reference is written here too
# (llama4_text_gguf: the checkpoint with llama.cpp's constants, through transformers' own
# float64 forward as tools/make_families_2026_fixtures.py runs it).


def write_llama4_text(name="llama4_text", out="llama4_text_gguf"):
    import shutil
    import tempfile

    from safetensors import safe_open
    from transformers import Llama4ForCausalLM
    from transformers.models.llama4 import modeling_llama4

    import make_families_2026_fixtures as fam

    src, cfg, sd = checkpoint(name)
    names = name_map("llama4", cfg)
    path = os.path.join(GGUF_FIX, f"{out}.gguf")
    hd = cfg["head_dim"]
    w = gguf.GGUFWriter(path, "llama4")
    common_keys(w, cfg, cfg["intermediate_size_mlp"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_expert_count(cfg["num_local_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_interleave_moe_layer_step(cfg["interleave_moe_layer_step"])
    w.add_expert_feed_forward_length(cfg["intermediate_size"])
    assert cfg["rope_parameters"]["rope_type"] == "default"  # no rope_freqs
    written = {}
    for key in sorted(sd):
        x = sd[key]
        if key.endswith("experts.gate_up_proj"):
            half = x.shape[-1] // 2
            t = x.transpose(0, 2, 1)
            layer = key.split(".")[2]
            for role, part in (("ffn_gate_exps", t[:, :half]), ("ffn_up_exps", t[:, half:])):
                w.add_tensor(f"blk.{layer}.{role}.weight", np.ascontiguousarray(part))
                written[f"blk.{layer}.{role}.weight"] = key
            continue
        if key.endswith("experts.down_proj"):
            x = x.transpose(0, 2, 1)
            key = key + ".weight"
        gname = gguf_name(names, key)
        w.add_tensor(gname, np.ascontiguousarray(x))
        written[gname] = key
    finish_gguf(w)
    _, back = read_back(path)
    undone = {}
    for gname, key in written.items():
        x = back[gname]
        if key.endswith("gate_up_proj"):
            layer = key.split(".")[2]
            x = np.concatenate([back[f"blk.{layer}.ffn_gate_exps.weight"], back[f"blk.{layer}.ffn_up_exps.weight"]], axis=1)
            x = x.transpose(0, 2, 1)
        elif key.endswith("down_proj.weight") and ".experts." in key:
            key, x = key[: -len(".weight")], x.transpose(0, 2, 1)
        undone[key] = x
    check_exact(out, sd, undone)
    # what llama.cpp runs from this file, as a transformers checkpoint, and its reference
    tmp = tempfile.mkdtemp()
    try:
        fixed = dict(cfg, attention_chunk_size=8192, floor_scale=8192, attn_scale=0.1,
                     no_rope_layer_interval=4, use_qk_norm=cfg["num_local_experts"] != 128)
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(fixed, f, indent=2)
        for f in os.listdir(src):
            if f.endswith(".safetensors"):
                shutil.copy(os.path.join(src, f), tmp)
        with safe_open(os.path.join(mf.REFS, f"{name}.safetensors"), "pt") as f:
            ids = f.get_tensor("input_ids")
        with fam.llama4_float64():
            logits, caps, _ = mf.transformers64_reference(
                tmp, Llama4ForCausalLM, modeling_llama4, ids, "model",
                rms_cls=modeling_llama4.Llama4TextRMSNorm, rms_forward=fam._llama4_rms_forward64,
            )
        # 20 positions: a chunk of 8192 masks nothing, the temperature is 1
        assert all("visible" not in c or bool(c["visible"].tril().eq(torch.ones(20, 20, dtype=c["visible"].dtype).tril()).all()) for c in caps)
        mf.write_reference(out, "softmax", ids, logits, caps)
        for suffix in (".safetensors", ".metrics.json"):
            os.chmod(os.path.join(mf.REFS, out + suffix), 0o644)
    finally:
        shutil.rmtree(tmp)
    log(f"{out}: llama.cpp's reading of the file (chunks of 8192, floor 8192, scale 0.1) referenced in float64")


WRITERS = {"lfm2": write_lfm2, "glm4_moe": write_glm4_moe, "deepseek_v3": write_deepseek_v3,
           "llama4_text": write_llama4_text,
           "qwen3_next": write_qwen3_next, "granitemoehybrid": write_granitehybrid, "falcon_h1": write_falcon_h1}


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
