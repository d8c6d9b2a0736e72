"""GPU verification (issue 8): the same fixture ids through asa-analyze on the CPU and on
CUDA (f32 and bf16); every value of attention.csv compared.

  python benches/gpu_verify.py --asa PATH/TO/asa-analyze [--out DIR]

Pass criteria (SPEC section 4 / issue 8): f32 GPU vs CPU within 1e-5 (abs, or relative for
|y| > 1); bf16 GPU vs CPU within 1e-2 relative (atol 1e-2). Prints one JSON report.
"""
import argparse
import csv
import json
import os
import subprocess
import sys

from safetensors.numpy import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = ["llama_gqa", "qwen2", "off_by_one", "sink", "gated", "affine_scaled", "affine_scaled_sigmoid_visible",
            "affine_scaled_gated", "scale_invariant", "logn", "qwen3"]


def table(path):
    rows = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            rows[(r["model"], r["metric"], r["layer"], r["head"], r["stat"])] = float(r["value"])
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--asa", required=True)
    p.add_argument("--out", default="/tmp/gpu_verify")
    p.add_argument("--devices", default="cpu:f32,cuda:f32,cuda:bf16")
    args = p.parse_args()
    report = {}
    for name in FIXTURES:
        ref = os.path.join(ROOT, "tests/fixtures/reference", f"{name}.safetensors")
        if not os.path.exists(ref):
            continue
        ids = load_file(ref)["input_ids"].tolist()
        ids_path = os.path.join(args.out, f"{name}.ids.json")
        os.makedirs(args.out, exist_ok=True)
        json.dump(ids, open(ids_path, "w"))
        tables = {}
        for dev in args.devices.split(","):
            device, dtype = dev.split(":")
            out = os.path.join(args.out, name, dev.replace(":", "_"))
            cmd = [args.asa, "analyze", f"{name}={ROOT}/tests/fixtures/models/{name}", "--corpus", ids_path,
                   "--seq-len", str(len(ids[0])), "--num-seqs", str(len(ids)), "--bos", "never", "--device", device,
                   "--dtype", dtype, "--out", out, "--quiet", "--batch-size", "3", "--block-size", "7"]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                report.setdefault(name, {})[dev] = {"error": r.stderr.strip()[-400:]}
                continue
            tables[dev] = table(os.path.join(out, "attention.csv"))
        base = tables.get("cpu:f32")
        for dev, t in tables.items():
            if dev == "cpu:f32" or base is None:
                continue
            worst_abs, worst_rel, worst_key, fails = 0.0, 0.0, None, 0
            atol, rtol = (1e-5, 1e-5) if dev.endswith("f32") else (1e-2, 2e-2)
            for key, y in base.items():
                x = t.get(key)
                if x is None:
                    fails += 1
                    continue
                d = abs(x - y)
                if d > worst_abs:
                    worst_abs, worst_key = d, key
                worst_rel = max(worst_rel, d / max(abs(y), 1e-12))
                if d > atol + rtol * abs(y):
                    fails += 1
            report.setdefault(name, {})[dev] = {"values": len(base), "max_abs_diff": worst_abs,
                                                "max_rel_diff": worst_rel, "worst": "/".join(worst_key or ()),
                                                "outside_tolerance": fails}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
