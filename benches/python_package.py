"""What the Python package costs over the CLI (issue 27), measured in one run.

For each workload, alternately: the CLI (`asa-analyze analyze ... --out DIR`, a fresh
process, wall time) and `asa_analyze.analyze(...)` followed by `.write(DIR)` in this process
(the same work: the same tables written), then `asa_analyze.analyze` alone (frames only).
Also `import asa_analyze` in a fresh interpreter. Medians of --repeats runs.

    python benches/python_package.py --repeats 5 [--smollm2 DIR]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(os.environ.get("ASA_ANALYZE_BIN", ROOT / "target" / "release" / "asa-analyze"))


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def import_time(repeats):
    code = "import time; t = time.perf_counter(); import asa_analyze; print(time.perf_counter() - t)"
    runs = [float(subprocess.check_output([sys.executable, "-c", code])) for _ in range(repeats)]
    return statistics.median(runs)


def workload(name, models, args, repeats):
    import asa_analyze as asa

    kwargs = dict(seq_len=args["seq_len"], num_seqs=args["num_seqs"], progress=False)
    cli_args = ["--seq-len", str(args["seq_len"]), "--num-seqs", str(args["num_seqs"]), "--quiet"]
    labelled = [f"{k}={v}" for k, v in models.items()]
    cli, py_write, py_frames = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeats):
            out = Path(tmp) / f"cli{i}"
            cli.append(timed(lambda: subprocess.run([str(BIN), "analyze", *labelled, *cli_args, "--out", str(out)], check=True, stdout=subprocess.DEVNULL)))
            out = Path(tmp) / f"py{i}"
            py_write.append(timed(lambda: asa.analyze(models, **kwargs).write(out)))
            py_frames.append(timed(lambda: asa.analyze(models, **kwargs).attention))
    c, w, f = (statistics.median(x) for x in (cli, py_write, py_frames))
    print(f"| {name} | {c:.3f} s | {w:.3f} s ({100 * (w / c - 1):+.1f}%) | {f:.3f} s ({100 * (f / c - 1):+.1f}%) |")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--smollm2", type=Path, default=Path.home() / ".cache/asa-analyze/smollm2/hf")
    a = p.parse_args()
    print(f"import asa_analyze (fresh interpreter, median of {a.repeats}): {1000 * import_time(a.repeats):.0f} ms")
    print()
    print("| workload | CLI (process, --out) | Python analyze + write | Python analyze (frames) |")
    print("|---|---|---|---|")
    fixtures = ROOT / "tests" / "fixtures" / "models"
    workload("fixtures sink + affine_scaled, 10 x 256", {"sink": fixtures / "sink", "asa": fixtures / "affine_scaled"},
             dict(seq_len=256, num_seqs=10), a.repeats)
    workload("every fixture family (28), 4 x 64", {d.name: d for d in sorted(fixtures.iterdir())},
             dict(seq_len=64, num_seqs=4), a.repeats)
    if a.smollm2.is_dir():
        workload("SmolLM2-135M, 4 x 512", {"smollm2": a.smollm2}, dict(seq_len=512, num_seqs=4), a.repeats)


if __name__ == "__main__":
    main()
