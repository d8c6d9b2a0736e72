"""The report's size and speed (issue 39's targets): builds `asa-analyze report` of a results
folder, then opens it in Debian's headless Chromium (python/tests/cdp.py: every request
blocked and recorded) several times, each in a fresh browser, and measures

- the first view: the time from the start of navigation (`performance.timeOrigin`) to the
  frame after the overview grids were drawn (`document.body.dataset.drawnAt`): reading the
  file, parsing it, compiling ECharts, inflating the data, drawing;
- switching heads: `selectHead(layer, head)` (what a click on a grid cell calls: its block
  map inflated and decoded, every chart of the head drawn for every model) until two
  animation frames later, for heads spread over the grid, each opened for the first time.

    benches/report_32k.py RESULTS_DIR [--out report.html] [--bin target/release/asa-analyze]
                          [--runs 3] [--json-out result.json]

The 32k run behind BENCHMARKS.md: SmolLM2-135M, one window of 32,768 tokens, every metric
and block_map at --map-size 256 (see BENCHMARKS.md for the command)."""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python" / "tests"))
import cdp  # noqa: E402

HEADS = [(1, 1), (8, 3), (15, 5), (22, 7), (30, 9), (2, 2), (16, 1), (29, 8)]

SWITCH = """(async () => {
  const t = performance.now();
  await selectHead(%d, %d);
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  return [performance.now() - t, document.querySelectorAll('#head-models canvas').length];
})()"""


def build(binary, results, out):
    cmd = ["/usr/bin/time", "-f", "%e %M", str(binary), "report", str(results), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    seconds, rss_kb = proc.stderr.strip().splitlines()[-1].split()
    return {"seconds": float(seconds), "peak_rss_gib": int(rss_kb) / 2**20, "bytes": out.stat().st_size,
            "notes": [l for l in proc.stderr.splitlines() if "report:" in l]}


def one_view(page):
    browser = cdp.Browser()
    try:
        start = time.time()
        browser.open(page.resolve().as_uri())
        drawn_at = float(browser.wait_for("document.body.dataset.drawnAt", timeout=120))
        wall = (time.time() - start) * 1000
        grid = browser.eval("document.querySelectorAll('.grid').length")
        switches = []
        for layer, head in HEADS:
            ms, canvases = browser.eval(SWITCH % (layer, head))
            switches.append({"layer": layer, "head": head, "ms": ms, "canvases": canvases})
        browser.pump(0.3)
        return {"first_view_ms": drawn_at, "first_view_wall_ms": wall, "grids": grid, "switches": switches,
                "requests": browser.requests, "errors": browser.errors}
    finally:
        browser.close()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results")
    p.add_argument("--out", default="report.html")
    p.add_argument("--bin", default=os.environ.get("ASA_ANALYZE_BIN", ROOT / "target" / "release" / "asa-analyze"))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--json-out")
    args = p.parse_args()
    out = Path(args.out)
    made = build(args.bin, args.results, out)
    print(f"report: {made['bytes'] / 1e6:.1f} MB in {made['seconds']:.1f} s, peak RSS {made['peak_rss_gib']:.2f} GiB")
    views = []
    for run in range(args.runs):
        v = one_view(out)
        views.append(v)
        ms = [s["ms"] for s in v["switches"]]
        print(f"run {run + 1}: first view {v['first_view_ms']:.0f} ms (wall {v['first_view_wall_ms']:.0f} ms), "
              f"head switch median {statistics.median(ms):.0f} ms, max {max(ms):.0f} ms, "
              f"requests {len(v['requests'])}, errors {len(v['errors'])}")
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": platform.node(),
              "cpus": os.cpu_count(), "load_avg": os.getloadavg(),
              "chromium": subprocess.run([cdp.chromium_path(), "--version"], capture_output=True, text=True).stdout.strip(),
              "report": made, "views": views}
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
