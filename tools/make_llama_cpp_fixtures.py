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
  gpt_oss_gguf  reference only: the `gpt_oss` checkpoint as llama.cpp runs the file its
              converter writes from it. The file carries no SwiGLU limit and llama.cpp fixes
              7 (the checkpoint's `swiglu_limit` is 1), and no YaRN `truncate`: ggml rounds
              the correction range (floor / ceil) as transformers does with `truncate`
              true (the checkpoint's is false). Every weight is the checkpoint's.

(Qwen3-Next's counterpart, `qwen3_next_like_80b`, is written by make_hybrid_fixtures.py with
its other checks.) References: transformers in float64 as make_fixtures.py computes them
(`transformers64_reference`, `write_reference`), then make_logit_key_fixtures.py. Checks
(printed): the float32 forward agrees, and every routing decision re-derived in float64 chooses
transformers' experts with a clear margin.

Run:  /tmp/asa-py-venv/bin/python tools/make_llama_cpp_fixtures.py
"""

import json
import os
import shutil
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixture_common as fc  # noqa: E402
import make_fixtures as mf  # noqa: E402
import make_logit_key_fixtures as lk  # noqa: E402
from make_fixtures import HIDDEN, TORCH64  # noqa: E402

from transformers import GptOssForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM  # noqa: E402
from transformers.models.gpt_oss import modeling_gpt_oss  # noqa: E402
from transformers.models.qwen3_moe import modeling_qwen3_moe  # noqa: E402

NAMES = ["qwen3_moe_like_30b", "gpt_oss_gguf"]
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


def gpt_oss_gguf(ids, checks):
    name = "gpt_oss_gguf"
    tmp = tempfile.mkdtemp()
    try:
        d = os.path.join(tmp, "gpt_oss")  # transformers64_reference runs experts eagerly by the name
        shutil.copytree(os.path.join(mf.MODELS, "gpt_oss"), d)
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        assert cfg["swiglu_limit"] == 1.0 and cfg["rope_parameters"]["truncate"] is False, cfg
        cfg["swiglu_limit"] = LLAMA_CPP_SWIGLU_LIMIT
        cfg["rope_parameters"]["truncate"] = True
        mf.write_json(os.path.join(d, "config.json"), cfg)
        logits, caps, d32 = mf.transformers64_reference(
            d, GptOssForCausalLM, modeling_gpt_oss, ids, "model", rms_cls=modeling_gpt_oss.GptOssRMSNorm
        )
    finally:
        shutil.rmtree(tmp)
    with torch.no_grad():
        from safetensors import safe_open
        with safe_open(os.path.join(mf.REFS, "gpt_oss.safetensors"), "pt") as f:
            checkpoint = f.get_tensor("logits").to(TORCH64)
    apart = (logits.to(TORCH64) - checkpoint).abs().max().item()
    assert apart > 1e-3, ("llama.cpp's model must differ from the checkpoint's", apart)
    checks.append(f"{name}: transformers float64-patched vs unpatched logits {mf.fmt(d32)}; vs the checkpoint's "
                  f"own model (limit 1, not truncated) logits differ by {apart:.4f}")
    M, sink_margin = mf.write_reference(name, "sink", ids, logits, caps)
    return name, mf.peak_stats(caps), sink_margin, M, "", d32


def main():
    tmp, tok_json, ids, cc = fc.start(NAMES)
    checks = []
    summary = [qwen3_moe_like_30b(cc, tok_json, ids, checks), gpt_oss_gguf(ids, checks)]
    shutil.rmtree(tmp)
    for dp, _, fns in os.walk(os.path.join(mf.MODELS, "qwen3_moe_like_30b")):
        for fn in fns:
            os.chmod(os.path.join(dp, fn), 0o644)
    for name in NAMES:
        for ext in (".safetensors", ".metrics.json"):
            os.chmod(os.path.join(mf.REFS, name + ext), 0o644)
    assert lk.main(["qwen3_moe_like_30b"]) == 0  # gpt_oss_gguf, as llama4_text_gguf: the GGUF test reads no logit_key
    fc.report(checks, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
