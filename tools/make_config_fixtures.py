#!/usr/bin/env python3
"""Configs read as transformers reads them: float64 logits of transformers' own forward pass
for non-default values of the config fields each family reads (windows, soft-caps, the query
scale, RoPE scaling types and their parameters, experts), on the weights of the committed
family fixtures.

Each case takes a fixture of tests/fixtures/models/ (written by tools/make_fixtures.py),
edits its config.json (`EDITS`: key -> value, `DELETE` removes the key) and runs
transformers 5 on it, eager attention in float64 with the float64 patch of make_fixtures.py
(RMSNorm, RoPE cos/sin and the softmax kept in float64; the same math). It writes

  tests/fixtures/configs/cases.json            the cases: name, base fixture, edits, what
                                               transformers does with them
  tests/fixtures/configs/logits.safetensors    input_ids [1, 24] (int64) and, per case,
                                               <name> [1, 24, vocab] float64 logits

and tests/it/config_fixtures.rs runs asa-analyze on each (the base fixture's weights under the
edited config.json) and compares the logits (SPEC: atol 1e-4).  T = 24 tokens: longer than
every window the cases set, so a window read wrongly changes the logits.  Deterministic: a
rerun writes the same bytes.

Run:  /tmp/torch-venv/bin/python tools/make_config_fixtures.py
"""

import json
import os
import shutil
import sys
import tempfile

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402  (the shared float64 transformers reference)

from transformers import (  # noqa: E402
    Gemma2ForCausalLM,
    Gemma3ForCausalLM,
    GPTNeoXForCausalLM,
    GptOssForCausalLM,
    LlamaForCausalLM,
    MistralForCausalLM,
    MixtralForCausalLM,
    Olmo2ForCausalLM,
    Phi3ForCausalLM,
    Qwen2ForCausalLM,
    Qwen3ForCausalLM,
    Qwen3MoeForCausalLM,
)
from transformers.models.gemma2 import modeling_gemma2  # noqa: E402
from transformers.models.gemma3 import modeling_gemma3  # noqa: E402
from transformers.models.gpt_neox import modeling_gpt_neox  # noqa: E402
from transformers.models.gpt_oss import modeling_gpt_oss  # noqa: E402
from transformers.models.llama import modeling_llama  # noqa: E402
from transformers.models.mistral import modeling_mistral  # noqa: E402
from transformers.models.mixtral import modeling_mixtral  # noqa: E402
from transformers.models.olmo2 import modeling_olmo2  # noqa: E402
from transformers.models.phi3 import modeling_phi3  # noqa: E402
from transformers.models.qwen2 import modeling_qwen2  # noqa: E402
from transformers.models.qwen3 import modeling_qwen3  # noqa: E402
from transformers.models.qwen3_moe import modeling_qwen3_moe  # noqa: E402

OUT = os.path.join(mf.FIX, "configs")
B, T = 1, 24
SEED_IDS = 4321
DELETE = "__delete__"
SLIDE, FULL = "sliding_attention", "full_attention"

# base fixture -> (model class, modeling module, base attribute, RMSNorm class, its float64 forward)
FAMILIES = {
    "llama_gqa": (LlamaForCausalLM, modeling_llama, "model", modeling_llama.LlamaRMSNorm, None),
    "qwen2": (Qwen2ForCausalLM, modeling_qwen2, "model", modeling_qwen2.Qwen2RMSNorm, None),
    "qwen3": (Qwen3ForCausalLM, modeling_qwen3, "model", modeling_qwen3.Qwen3RMSNorm, None),
    "qwen3_moe": (Qwen3MoeForCausalLM, modeling_qwen3_moe, "model", modeling_qwen3_moe.Qwen3MoeRMSNorm, None),
    "mistral": (MistralForCausalLM, modeling_mistral, "model", modeling_mistral.MistralRMSNorm, None),
    "mixtral": (MixtralForCausalLM, modeling_mixtral, "model", modeling_mixtral.MixtralRMSNorm, None),
    "phi3": (Phi3ForCausalLM, modeling_phi3, "model", modeling_phi3.Phi3RMSNorm, None),
    "olmo2": (Olmo2ForCausalLM, modeling_olmo2, "model", modeling_olmo2.Olmo2RMSNorm, None),
    "gemma2": (Gemma2ForCausalLM, modeling_gemma2, "model", modeling_gemma2.Gemma2RMSNorm, mf._gemma_rms_forward64),
    "gemma3": (Gemma3ForCausalLM, modeling_gemma3, "model", modeling_gemma3.Gemma3RMSNorm, mf._gemma_rms_forward64),
    "gpt_oss": (GptOssForCausalLM, modeling_gpt_oss, "model", modeling_gpt_oss.GptOssRMSNorm, None),
    "gpt_neox": (GPTNeoXForCausalLM, modeling_gpt_neox, "gpt_neox", None, None),
}

# (name, base fixture, edits of its config.json, what transformers does)
CASES = [
    # ---- windows
    ("qwen3_moe_use_sliding_window_windows_every_layer", "qwen3_moe",
     {"use_sliding_window": True, "sliding_window": 5, "max_window_layers": 1, "layer_types": [FULL, SLIDE]},
     "Qwen3MoeConfig has neither max_window_layers nor layer_types: one sliding mask (5) on every layer"),
    ("qwen3_moe_window_off_without_use_sliding_window", "qwen3_moe",
     {"use_sliding_window": False, "sliding_window": 5},
     "use_sliding_window false drops the window (sliding_window becomes None)"),
    ("qwen2_window_from_max_window_layers", "qwen2",
     {"use_sliding_window": True, "sliding_window": 5, "max_window_layers": 1, "layer_types": DELETE},
     "layer_types derived: layers i >= max_window_layers (1) slide"),
    ("qwen2_window_default_size_4096", "qwen2",
     {"use_sliding_window": True, "sliding_window": DELETE, "max_window_layers": 0, "layer_types": DELETE},
     "sliding_window absent: Qwen2Config's 4096 (every layer slides, longer than the text)"),
    ("qwen2_window_from_layer_types", "qwen2",
     {"use_sliding_window": True, "sliding_window": 5, "max_window_layers": 2, "layer_types": [SLIDE, FULL]},
     "layer_types given: they decide, max_window_layers is not read"),
    ("qwen2_layer_types_without_use_sliding_window", "qwen2",
     {"use_sliding_window": False, "sliding_window": 5, "layer_types": [SLIDE, SLIDE]},
     "use_sliding_window false drops the window, yet layer_types names sliding layers: refused"),
    ("qwen3_window_from_max_window_layers", "qwen3",
     {"use_sliding_window": True, "sliding_window": 7, "max_window_layers": 1, "layer_types": DELETE},
     "as Qwen2: layer 2 slides (7)"),
    ("mistral_window_every_layer_whatever_layer_types", "mistral",
     {"sliding_window": 5, "layer_types": [FULL, FULL]},
     "MistralModel builds one sliding mask for all layers; layer_types only warns"),
    ("mixtral_window_and_top3", "mixtral",
     {"sliding_window": 4, "num_experts_per_tok": 3},
     "a window of 4 on every layer, 3 experts a token, renormalised"),
    ("phi3_window_and_theta", "phi3",
     {"sliding_window": 6, "rope_parameters": {"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 0.75}},
     "a window of 6 on every layer, 3 of 4 rotary pairs at theta 500"),
    ("gemma2_window_on_layer_types", "gemma2",
     {"sliding_window": 4, "layer_types": [FULL, SLIDE], "query_pre_attn_scalar": 5},
     "layer 2 slides (4), q.k scaled by 5^-1/2"),
    ("gemma3_window_pattern_and_local_rope", "gemma3",
     {"sliding_window": 3, "layer_types": [SLIDE, SLIDE],
      "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                          "sliding_attention": {"rope_type": "linear", "factor": 3.0, "rope_theta": 100.0}}},
     "both layers slide (3); sliding layers' RoPE linear 3 at theta 100"),
    ("gpt_oss_window_layer_types_limit_top1", "gpt_oss",
     {"sliding_window": 3, "layer_types": [FULL, SLIDE], "swiglu_limit": 0.5, "num_experts_per_tok": 1},
     "layer 2 slides (3), SwiGLU clamped at 0.5, one expert a token"),
    ("gpt_oss_sliding_layer_types_without_a_window", "gpt_oss",
     {"sliding_window": None, "layer_types": [SLIDE, FULL]},
     "sliding_window null, yet layer_types names a sliding layer: refused"),
    # the config classes derive sliding layers when layer_types is absent, window or not:
    # with sliding_window null transformers then has no window for their mask (a TypeError)
    ("gemma2_null_window_without_layer_types", "gemma2",
     {"sliding_window": None, "layer_types": DELETE},
     "sliding_window null, layer_types absent: Gemma2Config derives sliding layers anyway: refused"),
    ("gemma3_null_window_without_layer_types", "gemma3",
     {"sliding_window": None, "layer_types": DELETE},
     "sliding_window null, layer_types absent: Gemma3TextConfig derives sliding layers anyway: refused"),
    ("gpt_oss_null_window_without_layer_types", "gpt_oss",
     {"sliding_window": None, "layer_types": DELETE},
     "sliding_window null, layer_types absent: GptOssConfig derives sliding layers anyway: refused"),
    ("qwen3_moe_window_default_size_4096", "qwen3_moe",
     {"use_sliding_window": True, "sliding_window": DELETE},
     "sliding_window absent: Qwen3MoeConfig's 4096 on every layer (longer than the text)"),
    ("mistral_window_default_size_4096", "mistral",
     {"sliding_window": DELETE},
     "sliding_window absent: MistralConfig's 4096 on every layer (longer than the text)"),
    # ---- soft-caps
    ("gemma2_huge_softcap_is_identity", "gemma2",
     {"attn_logit_softcapping": 1e308, "final_logit_softcapping": 1e308},
     "cap tanh(s / cap) with cap 1e308: the identity on every logit"),
    ("gemma2_no_softcaps", "gemma2",
     {"attn_logit_softcapping": None, "final_logit_softcapping": None},
     "null caps: no soft-capping"),
    ("gemma2_tight_softcaps", "gemma2",
     {"attn_logit_softcapping": 0.75, "final_logit_softcapping": 0.5},
     "caps that bend every logit"),
    ("gemma3_softcaps_configured", "gemma3",
     {"attn_logit_softcapping": 1.5, "final_logit_softcapping": 2.0, "query_pre_attn_scalar": 20},
     "Gemma 3 caps when configured"),
    # ---- RoPE
    ("llama_rope_linear", "llama_gqa",
     {"rope_parameters": {"rope_type": "linear", "factor": 3.0, "rope_theta": 500.0}},
     "every frequency / 3, theta 500"),
    ("llama_rope_dynamic_past_max_positions", "llama_gqa",
     {"rope_parameters": {"rope_type": "dynamic", "factor": 3.0, "rope_theta": 500.0}, "max_position_embeddings": 10},
     "NTK base growth for 24 tokens past 10"),
    ("llama_rope_yarn_all_parameters", "llama_gqa",
     {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1000.0, "original_max_position_embeddings": 8,
                          "beta_fast": 8.0, "beta_slow": 0.5, "mscale": 2.0, "mscale_all_dim": 1.0, "truncate": False}},
     "YaRN with mscale / mscale_all_dim, untruncated ramp"),
    ("llama_rope_yarn_attention_factor", "llama_gqa",
     {"rope_parameters": {"rope_type": "yarn", "factor": 2.0, "rope_theta": 1000.0, "original_max_position_embeddings": 12,
                          "attention_factor": 1.3}},
     "YaRN with an explicit attention factor"),
    ("llama_rope_llama3_parameters", "llama_gqa",
     {"rope_parameters": {"rope_type": "llama3", "factor": 4.0, "rope_theta": 2000.0, "low_freq_factor": 2.0,
                          "high_freq_factor": 8.0, "original_max_position_embeddings": 16}},
     "llama3 with non-default low/high frequency factors"),
    ("llama_rope_legacy_scaling", "llama_gqa",
     {"rope_parameters": DELETE, "rope_theta": 300.0, "rope_scaling": {"type": "linear", "factor": 2.0}},
     "legacy top-level rope_theta and rope_scaling (type)"),
    ("qwen2_rope_yarn", "qwen2",
     {"rope_parameters": {"rope_type": "yarn", "factor": 2.0, "rope_theta": 10000.0, "original_max_position_embeddings": 8,
                          "beta_fast": 16.0, "beta_slow": 2.0}},
     "YaRN on Qwen2"),
    ("olmo2_rope_linear_eps", "olmo2",
     {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 700.0}, "rms_norm_eps": 0.001},
     "linear RoPE, RMSNorm epsilon 1e-3"),
    ("gpt_neox_rotary_and_serial_residual", "gpt_neox",
     {"rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 300.0, "partial_rotary_factor": 0.5},
      "use_parallel_residual": False, "max_position_embeddings": 12},
     "dynamic NTK on half of each head, a serial residual"),
    ("gpt_oss_yarn_truncated", "gpt_oss",
     {"rope_parameters": {"rope_type": "yarn", "factor": 8.0, "rope_theta": 1000.0, "original_max_position_embeddings": 8,
                          "beta_fast": 16.0, "beta_slow": 2.0, "truncate": True}},
     "YaRN with the truncated ramp"),
    # ---- experts
    ("qwen3_moe_experts_renormalised_top3_sparse_step", "qwen3_moe",
     {"num_experts_per_tok": 3, "norm_topk_prob": True, "decoder_sparse_step": 2, "mlp_only_layers": []},
     "decoder_sparse_step 2 makes layer 1 dense and layer 2 sparse; top 3, renormalised"),
]


def edited_config(base, edits):
    with open(os.path.join(mf.MODELS, base, "config.json")) as f:
        cfg = json.load(f)
    for key, value in edits.items():
        if value == DELETE:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    return cfg


def case_logits(name, base, edits, ids):
    cls, mod, base_attr, rms_cls, rms_forward = FAMILIES[base]
    with tempfile.TemporaryDirectory() as tmp:
        # the folder name tells make_fixtures' reference to run MoE experts by their plain loop
        d = os.path.join(tmp, name if "moe" in name or base in ("mixtral", "gpt_oss") else "model")
        shutil.copytree(os.path.join(mf.MODELS, base), d)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(edited_config(base, edits), f, indent=2)
        logits, caps, d32 = mf.transformers64_reference(d, cls, mod, ids, base_attr, rms_cls=rms_cls, rms_forward=rms_forward)
    assert torch.isfinite(logits).all(), name
    windowed = [l for l, c in enumerate(caps) if "visible" in c]
    return logits, windowed, d32


def edits_json(edits):
    return {k: ("<delete>" if v == DELETE else v) for k, v in edits.items()}


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(OUT, exist_ok=True)
    g = torch.Generator().manual_seed(SEED_IDS)
    ids = torch.randint(0, mf.VOCAB, (B, T), generator=g, dtype=torch.int64)
    tensors = {"input_ids": ids}
    cases = []
    plain = {}
    for name, base, edits, what in CASES:
        try:
            logits, windowed, d32 = case_logits(name, base, edits, ids)
        except (ValueError, TypeError) as e:  # transformers refuses the config: so must asa-analyze
            cases.append({"name": name, "base": base, "edits": edits_json(edits), "transformers": what,
                          "transformers_error": str(e).splitlines()[0]})
            print(f"{name}: transformers refuses it: {e}")
            continue
        if base not in plain:
            plain[base] = case_logits(base, base, {}, ids)[0]
        changed = (logits - plain[base]).abs().max().item()
        tensors[name] = logits.contiguous()
        cases.append({
            "name": name,
            "base": base,
            "edits": edits_json(edits),
            "transformers": what,
            "windowed_layers": windowed,
            "changed_from_base": changed,
        })
        print(f"{name}: windowed layers {windowed}, logits moved {changed:.3e} from the base config, "
              f"float64 patch vs unpatched {d32:.1e}")
    save_file(tensors, os.path.join(OUT, "logits.safetensors"), metadata={"generator": "tools/make_config_fixtures.py"})
    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump({"seq_len": T, "num_seqs": B, "cases": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    sys.exit(main())
