#!/usr/bin/env python3
"""How far a bf16 computation of block_map may be from the float64 one (SPEC section 12).

SPEC section 12 bounds a bf16 analysis by FlashAttention's test rule: its error against the
float64 reference is at most twice that of the same computation done in bf16 by torch on
the same inputs.  This script measures torch's error for block_map: for every reference
fixture that transformers runs itself (the architectures of tools/make_fixtures.py whose
float32 eager forward reproduces the float64 `layers.{l}.pattern` to 1e-4; the variants
make_fixtures.py computes with its own forward -- sink, off_by_one, gated, affine_scaled*,
logn, scale_invariant -- are not transformers models and are skipped), it runs the model in
bfloat16 with eager attention (`output_attentions`: the weights torch's bf16 forward gives),
makes the block map of those weights and of the float64 weights with plain numpy
(G = 6 of the 20 positions: query and key block a hold positions floor(a T / G) ..
floor((a + 1) T / G); a cell's mean is the mean of the weights of its visible pairs over
sequences, its max their largest; cells without a visible pair are left out; per head and
over heads), and writes the largest |torch bf16 - float64| per fixture and stat to

    tests/fixtures/reference/block_map_bf16.json

Run it from anywhere (paths are relative to the repository root):

    python tools/make_block_map_bf16_fixture.py            # writes the JSON
    python tools/make_block_map_bf16_fixture.py --check    # recomputes, compares, writes nothing

Needs torch, transformers 5 and numpy; deterministic (CPU, fixed inputs); a few seconds.
"""

import argparse
import json
import os
import sys

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_logit_key_fixtures import FIXTURES, MODELS, REFS, read_safetensors  # noqa: E402

G = 6
OUT = os.path.join(REFS, "block_map_bf16.json")


def block_map(p, vis, g):
    """{(head or 'all', a, b): (mean, max)} of weights p [B, H, T, T] over visible pairs."""
    b_, h_, t, _ = p.shape
    edge = [a * t // g for a in range(g + 1)]
    out = {}
    for head in list(range(h_)) + ["all"]:
        heads = slice(None) if head == "all" else slice(head, head + 1)
        for a in range(g):
            for b in range(g):
                mask = vis[edge[a]:edge[a + 1], edge[b]:edge[b + 1]]
                if not mask.any():
                    continue
                w = p[:, heads, edge[a]:edge[a + 1], edge[b]:edge[b + 1]][:, :, mask]
                out[(head, a, b)] = (float(w.mean()), float(w.max()))
    return out


def attentions(name, ids, dtype):
    model = AutoModelForCausalLM.from_pretrained(
        os.path.join(MODELS, name), dtype=dtype, attn_implementation="eager"
    ).eval()
    with torch.no_grad():
        out = model(input_ids=ids, output_attentions=True)
    return [a.double().numpy() for a in out.attentions]


def skip_reason(name, R, ids):
    """Why transformers does not stand for the reference of `name` (None: it does): its
    float32 eager weights must be within 1e-4 of the float64 pattern of every layer."""
    layers = sum(1 for k in R if k.endswith(".pattern"))
    try:
        f32 = attentions(name, ids, torch.float32)
    except Exception as e:  # a variant transformers does not know (or loads without its weights)
        return f"transformers cannot run it: {type(e).__name__}"
    if len(f32) != layers:
        return "transformers gives another number of layers"
    far = max(float(np.abs(f32[l] - R[f"layers.{l}.pattern"]).max()) for l in range(layers))
    if far > 1e-4:
        return f"transformers' float32 weights differ from the reference by {far:.3g}"
    return None


def errors(name):
    """(largest |bf16 - float64| of the mean and the max cells), or the reason to skip."""
    R = read_safetensors(os.path.join(REFS, f"{name}.safetensors"))
    ids = torch.tensor(R["input_ids"]).long()
    layers = sum(1 for k in R if k.endswith(".pattern"))
    reason = skip_reason(name, R, ids)
    if reason is not None:
        return reason
    bf16 = attentions(name, ids, torch.bfloat16)
    worst = {"mean": 0.0, "max": 0.0}
    for l in range(layers):
        ref = R[f"layers.{l}.pattern"]
        t = ref.shape[-1]
        vis = R.get(f"layers.{l}.visible")
        vis = vis != 0 if vis is not None else np.tril(np.ones((t, t), dtype=bool))
        want, got = block_map(ref, vis, G), block_map(bf16[l], vis, G)
        assert want.keys() == got.keys()
        for cell, (m, x) in want.items():
            worst["mean"] = max(worst["mean"], abs(got[cell][0] - m))
            worst["max"] = max(worst["max"], abs(got[cell][1] - x))
    return worst


def write_or_check(doc, path, check):
    """Writes `doc` to `path`, or with `check` asserts that the committed file holds the same
    fixtures (measured and skipped) and every error within 1e-12."""
    if not check:
        with open(path, "w") as f:
            f.write(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(f"wrote {path}")
        return
    with open(path) as f:
        old = json.load(f)
    assert old["errors"].keys() == doc["errors"].keys(), "other fixtures"
    assert old["skipped"].keys() == doc["skipped"].keys(), "other fixtures skipped"
    for name, e in doc["errors"].items():
        assert old["errors"][name].keys() == e.keys(), (name, "other fields")
        for field, x in e.items():
            assert abs(old["errors"][name][field] - x) < 1e-12, (name, field, old["errors"][name][field], x)
    print(f"{os.path.basename(path)}: the same")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    transformers.logging.set_verbosity_error()
    doc = {"g": G, "torch": torch.__version__, "errors": {}, "skipped": {}}
    for name in FIXTURES:
        result = errors(name)
        if isinstance(result, str):
            doc["skipped"][name] = result
        else:
            doc["errors"][name] = result
        print(name, result)
    write_or_check(doc, OUT, args.check)


if __name__ == "__main__":
    main()
