#!/usr/bin/env python3
"""How far a bf16 computation of every metric may be from the float64 one (SPEC section 12).

SPEC section 12 bounds a bf16 analysis by FlashAttention's test rule: its error against the
float64 reference is at most twice that of the same computation done in bf16 by torch on
the same inputs.  tools/make_block_map_bf16_fixture.py measures torch's error for block_map;
this script does it for every metric of `<name>.metrics.json` (tools/make_fixtures.py) and
`<name>.logit_key.json` (tools/make_logit_key_fixtures.py).

Which fixtures: every one of make_logit_key_fixtures.FIXTURES that transformers runs itself,
by the block-map script's rule (its float32 eager weights reproduce the float64
`layers.{l}.pattern` to 1e-4): make_fixtures.py's architectures, those of
make_families_2026_fixtures.py (smollm3, olmo3, glm4_moe, llama4_text, deepseek_v3) and the
hybrids of make_hybrid_fixtures.py (lfm2, qwen3_next) and make_mamba2_fixtures.py
(granitemoehybrid, falcon_h1).  The variants make_fixtures.py computes with its own forward
(sink, off_by_one, gated, affine_scaled*, logn, scale_invariant) are not transformers models
and are skipped, with the reason.

Hybrids: their references hold the softmax-attention layers only, in order (`layers.{a}.*`
over attention layers; metrics.json "attention_layers" lists their 1-based decoder layers).
The eager attention is called by those layers only (a convolution, Mamba-2 or Gated DeltaNet
mixer never calls it), so the captures below are the same layers: each capture's
module.layer_idx is checked equal to attention_layers - 1 (to 0, 1, .. L - 1 where
"attention_layers" is absent), and their number to the reference's.

What torch computes: the model in bfloat16 with eager attention (transformers' own
`eager_attention_forward`, wrapped, not replaced), `output_attentions`, and

  pattern      the bf16 weights transformers returns (GPT-OSS: its sink column dropped);
  attn_scores  the bf16 logits its softmax sees: matmul(q, k^T) * scaling (and Gemma 2's
               tanh soft-cap) recomputed in bf16 from the q, k handed to the eager function
               with the same torch ops, checked bit for bit against the softmax's own input
               at every visible pair; -inf where transformers' mask hides a key;
  q, k         the bf16 post-RoPE (post-QK-norm) q [B, H, T, D] and k [B, KV, T, D] handed
               to the eager function, as the reference stores them;
  visible      transformers' mask (checked equal to the reference's `layers.{l}.visible`,
               or to the causal mask where the reference stores none);
  gate         (Qwen3-Next only) the bf16 attention output gate sigmoid(gate) [B, T, H*D]:
               a forward hook on each Qwen3NextAttention's q_proj applies the attention
               forward's own ops to its bf16 output (view [B, T, H, 2 D], torch.chunk into
               query and gate, gate reshaped [B, T, H D], torch.sigmoid), and a pre-hook on
               its o_proj checks that o_proj's input is the eager output [B, T, H*D] times
               this gate bit for bit; compute_metrics makes `gate` of it as of the
               reference's `layers.{a}.gate`;
  logits       the bf16 logits of the forward.

Every metric is then computed from these bf16 numbers (widened to float64) by the very
functions that made the references: `make_fixtures.compute_metrics` and
`make_logit_key_fixtures.compute` (imported, not rewritten).  So qk_mean and the uncapped
max_logit of Gemma 2 are numpy's float64 products of torch's bf16 q and k, as the reference
is of the float64 q and k; every other number comes from torch's bf16 weights, logits and
scores.

Written per fixture and field, the largest |torch bf16 - float64| over the field's numbers,
to

    tests/fixtures/reference/metrics_bf16.json

    {"torch", "transformers",
     "errors":  {name: {"first_token.mean": e, ..., "key_received.layer_mean": e}},
     "skipped": {name: reason}}

Fields are `metric.stat` (`head_total`, `sink_mass` and `gate` have no stat).  Structural
fields (first_token.visible_share, entropy.nan_count, heatmap.layer,
query_profile.query, weight_sum_hist.n, the band names) are not errors: they are asserted
equal here and in the test.  Two fields are not plain differences:

  weight_sum_hist.edges  the largest |bin edge (bin_lo, bin_hi) - float64|.  Where the
      reference is `degenerate` (weights that sum to 1 by construction: asa-analyze and the
      reference bin the constant pooled mean, tools/README.md "Degenerate weight-sum
      histogram"), torch's bf16 row sums spread by its rounding (~1e-3) and
      compute_metrics would bin that spread; torch's bins are then made by the same
      constant rule from its pooled mean (np.histogram of round(mean, 9), as
      compute_metrics does for a constant), so the error is that of the pooled mean.
  weight_sum_hist.count  how many pooled values sit in another bin than in the reference:
      sum over bins |count - float64 count| / 2 (0 or all n for a degenerate pool).

Bounds (crates/asa-analysis/tests/library/metrics_bf16.rs; this script only measures).  FlashAttention's rule takes
the max over a whole output, so the test bounds each metric by twice the largest error of
its fields (key_received's sums over queries and its means per query apart, as their units
differ; nll.ppl is exp(nll.mean) and is not bounded apart).  Where that is 0, 2 x 0 would
leave ours no rounding at all, so the bound is then a floor of 2 x 2^-8 x scale, 2^-8 being
bf16's unit roundoff and scale the metric's largest |float64 value| on that fixture (0 for a
metric that is 0 throughout, e.g. query_profile.sink_mass of a model without a sink).
Fixtures torch skips are held to twice the largest torch error of the metric over the
fixtures it runs.  weight_sum_hist.edges is a metric of its own; weight_sum_hist.count is
held to twice torch's moves (a degenerate pool must match exactly: its bins are those of a
constant); sink_rate.rate may differ only by heads whose float64 importance lies within the
sink_rate (importance) bound of sink_eps.  alpha.* and gate are held by the test to SPEC
section 12's flat atol 1e-2 + rtol 2e-2: alpha.* and the gated variants' gate exist only on
fixtures transformers cannot run (no torch error at all); Qwen3-Next's gate is the one gate
torch runs, and its torch error is recorded here like any other field's.  Single fields
are recorded (not only the metric's largest) so that a failing metric says which of its
stats is off.

Run it from anywhere (paths are relative to the repository root):

    python tools/make_metrics_bf16_fixture.py            # writes the JSON
    python tools/make_metrics_bf16_fixture.py --check    # recomputes, compares, writes nothing

Needs torch, transformers 5 and numpy (and what make_fixtures.py imports); deterministic
on one machine (CPU, fixed inputs; bf16 kernels may differ between CPUs); under a minute.
"""

import argparse
import contextlib
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures  # noqa: E402
import make_logit_key_fixtures  # noqa: E402
from make_block_map_bf16_fixture import skip_reason, write_or_check  # noqa: E402
from make_logit_key_fixtures import FIXTURES, MODELS, REFS, read_safetensors  # noqa: E402

OUT = os.path.join(REFS, "metrics_bf16.json")
UNIT_ROUNDOFF = 2.0 ** -8  # bf16: 8 significand bits

# (metric, stat) of <name>.metrics.json compared as plain differences; None: the metric itself
METRIC_FIELDS = [
    ("first_token", "mean"), ("first_token", "std"),
    ("entropy", "mean"), ("entropy", "std"), ("entropy", "per_head"),
    ("entropy_softmax", "mean"), ("entropy_softmax", "std"), ("entropy_softmax", "per_head"),
    ("weight_sum", "mean"), ("weight_sum", "std"), ("weight_sum", "p05"), ("weight_sum", "p25"),
    ("weight_sum", "p50"), ("weight_sum", "p75"), ("weight_sum", "p95"),
    ("qk_mean", "mean"), ("qk_mean", "abs_mean"), ("qk_mean", "per_layer_mean"),
    ("qk_mean", "per_layer_abs_mean"),
    ("head_total", None),
    ("heatmap", "values"),
    ("query_profile", "values"), ("query_profile", "sink_mass"),
    ("sink_mass", None),
    ("alpha", "mean"), ("alpha", "std"), ("alpha", "p05"), ("alpha", "p25"), ("alpha", "p50"),
    ("alpha", "p75"), ("alpha", "p95"), ("alpha", "alpha_ma"),
    ("gate", None),
    ("nll", "mean"), ("nll", "ppl"), ("nll", "per_position"),
    ("sink_rate", "importance"), ("sink_rate", "rate"),
    ("distance_profile", "per_layer"), ("distance_profile", "per_head"),
]
# (metric, stat) of <name>.logit_key.json
LOGIT_KEY_FIELDS = [
    ("max_logit", "max"), ("max_logit", "mean"), ("max_logit", "layer_max"),
    ("max_logit", "layer_mean"),
    ("max_logit_capped", "max"), ("max_logit_capped", "layer_max"),
    ("key_received", "sum"), ("key_received", "mean"), ("key_received", "layer_sum"),
    ("key_received", "layer_mean"),
]
# must be equal, not close (and weight_sum_hist.n)
STRUCTURAL = [("first_token", "visible_share"), ("entropy", "nan_count"),
              ("entropy_softmax", "nan_count"), ("heatmap", "layer"), ("query_profile", "query"),
              ("distance_profile", "bands"), ("options", None)]


def field(doc, metric, stat):
    """doc[metric][stat] (doc[metric] when stat is None), None where absent."""
    v = doc.get(metric)
    return v if v is None or stat is None else v.get(stat)


def name_of(metric, stat):
    return metric if stat is None else f"{metric}.{stat}"


def flat(v):
    """The numbers of a nested list, float64 (null: NaN)."""
    values = np.ravel(np.array(v, dtype=object))
    return np.array([np.nan if x is None or x == "NaN" else x for x in values], dtype=np.float64)


def largest_diff(got, want):
    """max |got - want| over two equally shaped nested lists; NaN only where both are."""
    g, w = flat(got), flat(want)
    assert g.shape == w.shape, (g.shape, w.shape)
    assert np.array_equal(np.isnan(g), np.isnan(w)), "NaN in one only"
    d = np.abs(g - w)[~np.isnan(w)]
    return float(d.max()) if d.size else 0.0


def scale_of(want):
    w = np.abs(flat(want))
    w = w[~np.isnan(w)]
    return float(w.max()) if w.size else 0.0


# ----------------------------------------------------------------------------
# the torch bf16 run
# ----------------------------------------------------------------------------
@contextlib.contextmanager
def softmax_inputs(seen):
    """Records the input of every F.softmax call (the eager attention's) in `seen`."""
    plain = F.softmax

    def recording(x, *args, **kwargs):
        seen.append(x.detach().clone())
        return plain(x, *args, **kwargs)

    F.softmax = recording
    try:
        yield
    finally:
        F.softmax = plain


def capture_layer(module, query, key, attention_mask, weights, kwargs, softmax_in):
    """The bf16 tensors of one attention call: q, k, the masked logits, the weights, the mask."""
    scaling = kwargs.get("scaling")
    if scaling is None:  # Gemma's and GPT-2's eager default
        scaling = query.size(-1) ** -0.5
    keys = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)
    # the eager functions' own bf16 ops, in their order
    scores, visible = make_fixtures.eager_scores(
        query, keys, attention_mask, scaling, kwargs.get("softcap")
    )
    t = scores.shape[-1]
    # what the softmax saw: the scores themselves at every visible pair (GPT-OSS: the
    # scores beside the sink column, less the row maximum, as its eager attention does)
    (seen,) = softmax_in
    sinks = getattr(module, "sinks", None)
    if sinks is not None:
        col = sinks.reshape(1, -1, 1, 1).expand(scores.shape[0], -1, t, 1).to(scores.dtype)
        masked = scores if attention_mask is None else scores + attention_mask
        comb = torch.cat([masked, col], dim=-1)
        want = (comb - comb.max(-1, keepdim=True).values)[..., :-1]
    else:
        want = scores
    assert torch.equal(seen[..., :t][..., visible], want[..., visible]), "not the softmax's logits"
    return {
        "q": query.double().numpy(),
        "k": key.double().numpy(),
        "attn_scores": scores.masked_fill(~visible, float("-inf")).double().numpy(),
        "pattern": weights.double().numpy(),
        "visible": visible.double().numpy(),
    }


def output_gate_hooks(model, mod, gates):
    """Qwen3-Next's attention output gate: a forward hook on each gated attention's q_proj
    appends sigmoid(gate) [B, T, H*D] to `gates`, by the attention forward's own bf16 ops
    (q_proj output viewed [B, T, H, 2 D], torch.chunk into query and gate, the gate reshaped
    [B, T, H D], torch.sigmoid); a forward pre-hook on its o_proj appends o_proj's input to
    `gates` as well (checked against eager output x gate).  Returns the hook handles (none
    for a model without an output gate)."""
    gated = getattr(mod, "Qwen3NextAttention", None)
    handles = []
    for m in model.modules():
        if gated is None or not isinstance(m, gated):
            continue

        def gate_of(q_proj, args, out, m=m):
            shape = out.shape[:-1]
            _, gate = torch.chunk(out.view(*shape, -1, m.head_dim * 2), 2, dim=-1)
            gates.append(("gate", torch.sigmoid(gate.reshape(*shape, -1)).detach().clone()))

        def o_proj_in(o_proj, args):
            gates.append(("o_proj_in", args[0].detach().clone()))

        handles.append(m.q_proj.register_forward_hook(gate_of))
        handles.append(m.o_proj.register_forward_pre_hook(o_proj_in))
    return handles


def torch_bf16(name, ids):
    """Logits, per-layer captures and the decoder layer (0-based) of each capture of the bf16
    eager forward of fixture `name`: one capture per call of the eager attention, that is per
    softmax-attention layer (a hybrid's other mixers never call it)."""
    model = AutoModelForCausalLM.from_pretrained(
        os.path.join(MODELS, name), dtype=torch.bfloat16, attn_implementation="eager"
    ).eval()
    mod = sys.modules[type(model).__module__]
    eager = mod.eager_attention_forward
    caps, layers, outs, gates = [], [], [], []

    def wrapped(module, query, key, value, attention_mask, *args, **kwargs):
        seen = []
        with softmax_inputs(seen):
            out, weights = eager(module, query, key, value, attention_mask, *args, **kwargs)
        assert not args, "positional arguments past the mask"
        caps.append(capture_layer(module, query, key, attention_mask, weights, kwargs, seen))
        layers.append(module.layer_idx)
        outs.append(out.detach().clone())
        return out, weights

    handles = output_gate_hooks(model, mod, gates)
    mod.eager_attention_forward = wrapped
    try:
        with torch.no_grad():
            out = model(input_ids=ids, output_attentions=True, use_cache=False)
    finally:
        mod.eager_attention_forward = eager
        for h in handles:
            h.remove()
    assert len(caps) == len(out.attentions)
    for c, a in zip(caps, out.attentions):
        assert np.array_equal(c["pattern"], a.double().numpy())
    if handles:
        # per gated attention call: its gate (q_proj), then o_proj's input, which must be
        # transformers' (eager output [B, T, H*D]) x sigmoid(gate) bit for bit
        assert [k for k, _ in gates] == ["gate", "o_proj_in"] * len(caps), [k for k, _ in gates]
        for c, o, (_, g), (_, x) in zip(caps, outs, gates[0::2], gates[1::2]):
            assert g.dtype == torch.bfloat16
            assert torch.equal(o.reshape(*g.shape[:-1], -1).contiguous() * g, x), "not the gate applied"
            c["gate"] = g.double().numpy()
    return out.logits.double().numpy(), caps, layers


# ----------------------------------------------------------------------------
# errors
# ----------------------------------------------------------------------------
def hist_errors(got, want, pooled_mean):
    """(edges error, values in another bin) of torch's weight_sum_hist against the float64
    one; a degenerate reference's bins are the constant rule's at torch's pooled mean."""
    if want["degenerate"]:
        v = round(float(pooled_mean), 9)  # compute_metrics' constant, np.histogram's rule
        count, edges = np.histogram(np.full(want["n"], v), bins=len(want["count"]))
        got = {"bin_lo": edges[:-1].tolist(), "bin_hi": edges[1:].tolist(), "count": count.tolist()}
    edges = max(largest_diff(got["bin_lo"], want["bin_lo"]), largest_diff(got["bin_hi"], want["bin_hi"]))
    moved = sum(abs(a - b) for a, b in zip(got["count"], want["count"])) / 2
    return edges, moved


def check_structure(name, M, want):
    for metric, stat in STRUCTURAL:
        if field(want, metric, stat) is not None:
            assert field(M, metric, stat) == field(want, metric, stat), (name, metric, stat)
    assert M["weight_sum_hist"]["n"] == want["weight_sum_hist"]["n"], name


def scales(name):
    """max |float64 value| per field of fixture `name`."""
    want = json.load(open(os.path.join(REFS, f"{name}.metrics.json")))
    lk = json.load(open(os.path.join(REFS, f"{name}.logit_key.json")))
    out = {}
    for doc, fields in ((want, METRIC_FIELDS), (lk, LOGIT_KEY_FIELDS)):
        for metric, stat in fields:
            v = field(doc, metric, stat)
            if v is not None:
                out[name_of(metric, stat)] = scale_of(v)
    hist = want["weight_sum_hist"]
    out["weight_sum_hist.edges"] = scale_of([hist["bin_lo"], hist["bin_hi"]])
    out["weight_sum_hist.count"] = float(hist["n"])
    return out


def errors(name):
    """{field: largest |torch bf16 - float64|}, or the reason to skip."""
    R = read_safetensors(os.path.join(REFS, f"{name}.safetensors"))
    ids = torch.tensor(R["input_ids"]).long()
    reason = skip_reason(name, R, ids)
    if reason is not None:
        return reason
    want = json.load(open(os.path.join(REFS, f"{name}.metrics.json")))
    want_lk = json.load(open(os.path.join(REFS, f"{name}.logit_key.json")))
    opts = want["options"]
    assert (opts["min_query"], opts["bins"], opts["sink_eps"], opts["seq_len"]) == (
        make_fixtures.MIN_QUERY, make_fixtures.BINS, make_fixtures.SINK_EPS, make_fixtures.T)
    logits, caps, layers = torch_bf16(name, ids)
    # hybrids: the reference captures only the softmax-attention layers, in order
    # (metrics.json "attention_layers", 1-based decoder layers); so does the eager wrapper
    attention_layers = want.get("attention_layers")
    expect = range(len(caps)) if attention_layers is None else [a - 1 for a in attention_layers]
    assert layers == list(expect), (name, layers, attention_layers)
    assert len(caps) == sum(1 for k in R if k.endswith(".pattern")), name
    for l, c in enumerate(caps):
        ref_vis = R.get(f"layers.{l}.visible")
        causal = np.tril(np.ones(c["visible"].shape))
        assert np.array_equal(c["visible"], causal if ref_vis is None else ref_vis), (name, l)
        if ref_vis is None:
            del c["visible"]  # as the reference stores it: only where a window hides keys
    # the reference's own definitions, on torch's bf16 numbers
    M, _ = make_fixtures.compute_metrics(name, want["variant"], R["input_ids"], logits, caps, None)
    Rt = {f"layers.{l}.{key}": v for l, c in enumerate(caps) for key, v in c.items()}
    LK, _, _ = make_logit_key_fixtures.compute(name, Rt, opts["min_query"])
    check_structure(name, M, want)
    out = {}
    for got, ref, fields in ((M, want, METRIC_FIELDS), (LK, want_lk, LOGIT_KEY_FIELDS)):
        for metric, stat in fields:
            g, w = field(got, metric, stat), field(ref, metric, stat)
            assert (g is None) == (w is None), (name, metric, stat)
            if w is not None:
                out[name_of(metric, stat)] = largest_diff(g, w)
    pooled_mean = np.mean(M["weight_sum"]["mean"])  # every layer pools as many values
    out["weight_sum_hist.edges"], out["weight_sum_hist.count"] = hist_errors(
        M["weight_sum_hist"], want["weight_sum_hist"], pooled_mean)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    transformers.logging.set_verbosity_error()
    doc = {"torch": torch.__version__, "transformers": transformers.__version__, "errors": {},
           "skipped": {}}
    for name in FIXTURES:
        result = errors(name)
        if isinstance(result, str):
            doc["skipped"][name] = result
            print(f"{name}: skipped, {result}")
            continue
        doc["errors"][name] = result
        print(f"{name}:")
        scale = scales(name)
        for f_, e in result.items():
            floor = UNIT_ROUNDOFF * scale[f_]
            note = f"  (0; 2^-8 x the field's scale {scale[f_]:.3g} = {floor:.2e})" if (
                e == 0 and f_ not in ("weight_sum_hist.count", "sink_rate.rate")) else ""
            print(f"  {f_:34} {e:.3e}{note}")
    write_or_check(doc, OUT, args.check)


if __name__ == "__main__":
    main()
