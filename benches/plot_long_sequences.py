"""Peak RSS and time against sequence length for the long-sequence benchmark.

  python benches/plot_long_sequences.py benches/results/long_smollm2_*.json --out plot.png

Reads side_by_side.py reports (one per length) and draws two panels: peak RSS (GiB) and
time (s) against T, one line per way of doing the job; a run that failed is drawn as a
cross at the memory it had reached, labelled with its error. Prints the least-squares
slope of each way's peak RSS against T (GiB per 1k tokens).
"""
import argparse
import json
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

WAYS = [
    ("asa-analyze", "asa-analyze, every metric", "tab:blue"),
    ("transformers eager + metrics", "transformers eager + output_attentions + metrics", "tab:red"),
    ("transformers sdpa forward (floor)", "transformers SDPA forward (floor)", "tab:gray"),
]


def asked_gib(error):
    """The allocation a failed run asked for, in GiB, from torch's error message (or None)."""
    m = re.search(r"allocate (\d+) bytes", error)
    return int(m.group(1)) / 2**30 if m else None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("reports", nargs="+")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    reports = sorted((json.load(open(f)) for f in args.reports), key=lambda r: r["seq_len"])
    fig, (ax_mem, ax_time) = plt.subplots(1, 2, figsize=(11, 4.6))
    for key, label, colour in WAYS:
        ok = [(r["seq_len"], r["results"][key]) for r in reports if key in r["results"] and "error" not in r["results"][key]]
        failed = [(r["seq_len"], r["results"][key]) for r in reports if key in r["results"] and "error" in r["results"][key]]
        if ok:
            t = np.array([x for x, _ in ok])
            rss = np.array([v["peak_rss_gib"] for _, v in ok])
            secs = np.array([v["wall_s"] if key == "asa-analyze" else v.get("inner_s", v["wall_s"]) for _, v in ok])
            ax_mem.plot(t / 1024, rss, "o-", color=colour, label=label)
            ax_time.plot(t / 1024, secs, "o-", color=colour)
            if len(t) >= 2:
                slope, icept = np.polyfit(t / 1024, rss, 1)
                print(f"{label}: peak RSS {icept:.3f} GiB + {slope:.4f} GiB per 1k tokens (least squares over T = {[int(x) for x in t]})")
        for t, v in failed:
            ax_mem.plot([t / 1024], [v["peak_rss_gib"]], "x", color=colour, markersize=10, mew=2)
            asked = asked_gib(v["error"])
            note = f"out of memory\n(asked for {asked:.1f} GiB more)" if asked else "failed"
            last = t == reports[-1]["seq_len"]
            ax_mem.annotate(note, (t / 1024, v["peak_rss_gib"]), textcoords="offset points",
                            xytext=(-10 if last else 10, -6), ha="right" if last else "left", va="top",
                            fontsize=7, color=colour)
    ticks = [r["seq_len"] / 1024 for r in reports]
    ax_mem.set_ylabel("peak RSS (GiB)")
    ax_mem.set_ylim(0, ax_mem.get_ylim()[1] * 1.1)
    ax_time.set_ylabel("seconds (log scale)")
    ax_time.set_yscale("log")
    for ax, title in ((ax_mem, "Peak memory"), (ax_time, "Time")):
        ax.set_xlabel("sequence length T (k tokens)")
        ax.set_title(title)
        ax.set_xticks(ticks, [f"{int(x)}k" for x in ticks])
        ax.grid(True, which="both", alpha=0.3)
    fig.legend(loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle("SmolLM2-135M, f32, 1 sequence, 2 CPU cores (time: asa-analyze wall; transformers: forward only)", fontsize=9)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(args.out, dpi=120)


if __name__ == "__main__":
    main()
