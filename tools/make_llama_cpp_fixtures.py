#!/usr/bin/env python3
"""Float64 references for what llama.cpp's converter and runtime take, where the family
fixtures of make_fixtures.py are not in that form (issue 65 item 5):

  qwen3_moe_like_30b  a Qwen3-MoE checkpoint in the layout of Qwen3-30B-A3B: every layer's
              MLP a mixture of experts (`mlp_only_layers` [], `decoder_sparse_step` 1) and
              the top-k probabilities renormalised (`norm_topk_prob` true). The `qwen3_moe`
              fixture has a dense layer 0, which llama.cpp's converter does not map and its
              qwen3moe loader does not have. Otherwise as `qwen3_moe` (make_fixtures.py):
              4 experts of 24, 2 a token, Qwen3's per-head QK-norm; init seed 1103 (every
              routing decision clear of its runner-up by > 1e-3, checked).
  gpt2_like_124m  a GPT-2 checkpoint in the layout of openai-community/gpt2: `n_inner` null
              (an MLP of 4 x n_embd = 128). The converter writes `feed_forward_length` as
              4 x n_embd whatever `n_inner` says, so the `gpt2` fixture (n_inner 64) gives a
              file whose tensors do not fit it. Otherwise as `gpt2` (make_fixtures.py), seeds
              707 / 708.

References only, of a checkpoint as llama.cpp runs the file its converter writes from it
(every weight the checkpoint's; what the file does not carry, llama.cpp's fixed choice):

  gpt_oss_gguf   `gpt_oss` with SwiGLU limit 7 (llama.cpp fixes it; the checkpoint's is 1)
                 and YaRN's correction range rounded (ggml floors / ceils it, transformers'
                 `truncate` true; the checkpoint's is false).
  qwen2_window_gguf  `qwen2_window` without its window (the converter writes no
                 `use_sliding_window`; llama.cpp's qwen2 has none).
  gemma2_gguf    `gemma2` with q.k scaled by head_dim^-1/2 (`query_pre_attn_scalar` 8, as
                 llama.cpp scales Gemma 2 below 27B; the checkpoint's 12 is not written).
  gemma3_gguf    `gemma3` as llama.cpp's gemma3 reads a file without a sliding pattern:
                 every 6th layer global (so both of its 2 layers sliding, with the sliding
                 layers' RoPE), q.k scaled by head_dim^-1/2 (the checkpoint's 12 not written).

(Qwen3-Next's counterpart, `qwen3_next_like_80b`, is written by make_hybrid_fixtures.py with
its other checks.) References: transformers in float64 as make_fixtures.py computes them
(`transformers64_reference`, `write_reference`), then make_logit_key_fixtures.py. Checks
(printed): the float32 forward agrees, and every routing decision re-derived in float64 chooses
transformers' experts with a clear margin.

Run:  /tmp/asa-py-venv/bin/python tools/make_llama_cpp_fixtures.py
"""

import json
import math
import os
import shutil
import sys
import tempfile

import torch
from safetensors import safe_open

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixture_common as fc  # noqa: E402
import make_fixtures as mf  # noqa: E402
import make_logit_key_fixtures as lk  # noqa: E402
from make_fixtures import HIDDEN, TORCH64  # noqa: E402

from transformers import (  # noqa: E402
    Gemma2ForCausalLM, Gemma3ForCausalLM, GPT2Config, GPT2LMHeadModel, GptOssForCausalLM, Qwen2ForCausalLM,
    Qwen3MoeConfig, Qwen3MoeForCausalLM,
)
from transformers.models.gemma2 import modeling_gemma2  # noqa: E402
from transformers.models.gemma3 import modeling_gemma3  # noqa: E402
from transformers.models.gpt2 import modeling_gpt2  # noqa: E402
from transformers.models.gpt_oss import modeling_gpt_oss  # noqa: E402
from transformers.models.qwen2 import modeling_qwen2  # noqa: E402
from transformers.models.qwen3_moe import modeling_qwen3_moe  # noqa: E402

CHECKPOINTS = ["qwen3_moe_like_30b", "gpt2_like_124m"]
AS_LLAMA_CPP_RUNS = ["gpt_oss_gguf", "qwen2_window_gguf", "gemma2_gguf", "gemma3_gguf"]
NAMES = CHECKPOINTS + AS_LLAMA_CPP_RUNS
MOE_30B_SEED = 1103
ROUTE_MARGIN = 1e-3
# what llama.cpp's gpt-oss runs that its file does not say (llama-graph.cpp, ggml.c)
LLAMA_CPP_SWIGLU_LIMIT = 7.0


def routing_margin(routers, top_k):
    """The smallest gap between the k-th and the next router probability, in float64, over
    every token of every recorded router call; asserts float64 chooses transformers' experts."""
    margin = float("inf")
    for router, x, (_, _, idx32) in routers:
        p = torch.softmax(fc.router_logits64(router, x), dim=-1)
        margin = min(margin, fc.topk_margin(p, top_k))
        chosen = p.topk(top_k, dim=-1).indices.sort(dim=-1).values
        assert torch.equal(chosen, idx32.sort(dim=-1).values), "float64 routing chose other experts"
    return margin


def qwen3_moe_like_30b(cc, tok_json, ids, checks):
    name = "qwen3_moe_like_30b"
    cfg = Qwen3MoeConfig(
        **cc,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=False,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=24,
        norm_topk_prob=True,
        decoder_sparse_step=1,
        mlp_only_layers=[],
    )
    torch.manual_seed(11)
    model = Qwen3MoeForCausalLM(cfg)
    mf.init_weights(model, seed=MOE_30B_SEED)
    d, saved, keys = fc.save_model(name, model, tok_json)
    assert saved["mlp_only_layers"] == [] and saved["norm_topk_prob"] is True, saved
    for layer in range(mf.LAYERS):
        assert keys[f"model.layers.{layer}.mlp.gate.weight"] == (4, HIDDEN), sorted(keys)
        assert keys[f"model.layers.{layer}.mlp.experts.3.down_proj.weight"] == (HIDDEN, 24), sorted(keys)
    record = (modeling_qwen3_moe.Qwen3MoeTopKRouter,
              lambda m, a, kw, o: (m, a[0].detach().clone(), tuple(t.detach().clone() for t in o)))
    with fc.recording(*record) as routers:
        logits, caps, d32 = mf.transformers64_reference(
            d, Qwen3MoeForCausalLM, modeling_qwen3_moe, ids, "model", rms_cls=modeling_qwen3_moe.Qwen3MoeRMSNorm
        )
    # the recording also holds the float32 forward's calls: the float64 run's come first
    margin = routing_margin(routers[: mf.LAYERS], cfg.num_experts_per_tok)
    assert margin > ROUTE_MARGIN, (name, margin)
    checks.append(f"{name}: transformers float64-patched vs unpatched logits {mf.fmt(d32)}; routing re-derived in "
                  f"float64: same experts, smallest top-2 / 3rd probability margin {margin:.4f}")
    M, sink_margin = mf.write_reference(name, "softmax", ids, logits, caps)
    return name, mf.peak_stats(caps), sink_margin, M, "", d32


def gpt2_like_124m(cc, tok_json, ids, checks):
    name = "gpt2_like_124m"
    cfg = GPT2Config(
        vocab_size=mf.VOCAB, n_embd=HIDDEN, n_layer=mf.LAYERS, n_head=mf.HEADS, n_inner=None,
        n_positions=mf.MAX_POS, layer_norm_epsilon=mf.EPS, activation_function="gelu_new",
        bos_token_id=cc["bos_token_id"], eos_token_id=cc["eos_token_id"],
    )
    torch.manual_seed(7)
    model = GPT2LMHeadModel(cfg)
    mf.init_weights(model, seed=707, bias_std=0.3)
    g = torch.Generator().manual_seed(708)
    with torch.no_grad():
        for pname, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if ".ln_" in pname and pname.endswith(".weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
    d, saved, keys = fc.save_model(name, model, tok_json)
    assert saved["n_inner"] is None and keys["transformer.h.0.mlp.c_fc.weight"] == (HIDDEN, 4 * HIDDEN), saved
    logits, caps, d32 = mf.transformers64_reference(d, GPT2LMHeadModel, modeling_gpt2, ids, "transformer")
    checks.append(f"{name}: transformers float64-patched vs unpatched logits {mf.fmt(d32)}")
    M, sink_margin = mf.write_reference(name, "softmax", ids, logits, caps)
    return name, mf.peak_stats(caps), sink_margin, M, "", d32


def gpt_oss_as_llama_cpp_runs(cfg):
    assert cfg["swiglu_limit"] == 1.0 and cfg["rope_parameters"]["truncate"] is False, cfg
    cfg["swiglu_limit"] = LLAMA_CPP_SWIGLU_LIMIT
    cfg["rope_parameters"]["truncate"] = True


def qwen2_window_as_llama_cpp_runs(cfg):
    assert cfg["use_sliding_window"] is True and cfg["layer_types"] == ["full_attention", "sliding_attention"], cfg
    cfg["use_sliding_window"] = False
    cfg["layer_types"] = ["full_attention"] * 2


def gemma_scaled_by_head_dim(cfg):
    assert cfg["query_pre_attn_scalar"] == 12 and cfg["head_dim"] == mf.HEAD_DIM, cfg
    cfg["query_pre_attn_scalar"] = mf.HEAD_DIM


def gemma3_as_llama_cpp_runs(cfg):
    gemma_scaled_by_head_dim(cfg)
    assert cfg["layer_types"] == ["sliding_attention", "full_attention"], cfg
    cfg["layer_types"] = ["sliding_attention"] * 2  # layer l sliding when l mod 6 < 5


GEMMA2_CAP = 2.5  # the gemma2 fixture's attn_logit_softcapping
# name: (the checkpoint, its config as llama.cpp runs the file, transformers' class and module,
# the RMSNorm class and float64 forward, the variant, the logit the softmax normalises)
AS_RUN = {
    "gpt_oss_gguf": ("gpt_oss", gpt_oss_as_llama_cpp_runs, GptOssForCausalLM, modeling_gpt_oss,
                     modeling_gpt_oss.GptOssRMSNorm, None, "sink", None),
    "qwen2_window_gguf": ("qwen2_window", qwen2_window_as_llama_cpp_runs, Qwen2ForCausalLM, modeling_qwen2,
                          modeling_qwen2.Qwen2RMSNorm, None, "softmax", None),
    "gemma2_gguf": ("gemma2", gemma_scaled_by_head_dim, Gemma2ForCausalLM, modeling_gemma2,
                    modeling_gemma2.Gemma2RMSNorm, mf._gemma_rms_forward64, "softmax",
                    lambda l, h, i, j, s: GEMMA2_CAP * math.tanh(s / GEMMA2_CAP)),
    "gemma3_gguf": ("gemma3", gemma3_as_llama_cpp_runs, Gemma3ForCausalLM, modeling_gemma3,
                    modeling_gemma3.Gemma3RMSNorm, mf._gemma_rms_forward64, "softmax", None),
}


def as_llama_cpp_runs(name, ids, checks):
    """The reference of AS_RUN[name]: the checkpoint's weights under the edited config, through
    transformers in float64; checked to differ from the checkpoint's own reference."""
    source, edit, cls, mod, rms_cls, rms_forward, variant, logit_fn = AS_RUN[name]
    tmp = tempfile.mkdtemp()
    try:
        d = os.path.join(tmp, source)  # transformers64_reference runs MoE experts eagerly by the name
        shutil.copytree(os.path.join(mf.MODELS, source), d)
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        edit(cfg)
        mf.write_json(os.path.join(d, "config.json"), cfg)
        logits, caps, d32 = mf.transformers64_reference(
            d, cls, mod, ids, "model", rms_cls=rms_cls, rms_forward=rms_forward
        )
    finally:
        shutil.rmtree(tmp)
    with safe_open(os.path.join(mf.REFS, f"{source}.safetensors"), "pt") as f:
        own = f.get_tensor("logits").to(TORCH64)
    apart = (logits.to(TORCH64) - own).abs().max().item()
    assert apart > 1e-3, (name, "llama.cpp's model must differ from the checkpoint's", apart)
    checks.append(f"{name}: transformers float64-patched vs unpatched logits {mf.fmt(d32)}; vs {source}'s own "
                  f"model logits differ by {apart:.4f}")
    M, sink_margin = mf.write_reference(name, variant, ids, logits, caps, logit_fn=logit_fn)
    return name, mf.peak_stats(caps), sink_margin, M, "", d32


def main():
    tmp, tok_json, ids, cc = fc.start(NAMES)
    checks = []
    summary = [qwen3_moe_like_30b(cc, tok_json, ids, checks), gpt2_like_124m(cc, tok_json, ids, checks)]
    summary += [as_llama_cpp_runs(name, ids, checks) for name in AS_LLAMA_CPP_RUNS]
    shutil.rmtree(tmp)
    for name in NAMES:
        for dp, _, fns in os.walk(os.path.join(mf.MODELS, name)):
            for fn in fns:
                os.chmod(os.path.join(dp, fn), 0o644)
        for ext in (".safetensors", ".metrics.json"):
            os.chmod(os.path.join(mf.REFS, name + ext), 0o644)
    # the checkpoints' logit_key.json; the GGUF tests of the others read none (as llama4_text_gguf)
    assert lk.main(CHECKPOINTS) == 0
    fc.report(checks, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
