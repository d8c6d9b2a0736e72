"""Peak RSS and time against sequence length for the long-sequence benchmark.

  python benches/plot_long_sequences.py benches/results/long_smollm2_*.json --out plot.png

Reads side_by_side.py reports (one per length) and draws two panels: peak RSS (GiB) and
time (s) against T, one line per way of doing the job; a run that failed is drawn as a
cross at the memory it had reached, labelled with its error. Prints the least-squares
slope of each way's peak RSS against T (GiB per 1k tokens).
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

WAYS = [
    ("asa-analyze", "asa-analyze, every metric", "tab:blue"),
    ("transformers eager + metrics", "transformers eager + output_attentions + metrics", "tab:red"),
    ("transformers sdpa forward (floor)", "transformers SDPA forward (floor)", "tab:gray"),
]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("reports", nargs="+")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    reports = sorted((json.load(open(f)) for f in args.reports), key=lambda r: r["seq_len"])
    fig, (ax_mem, ax_time) = plt.subplots(1, 2, figsize=(11, 4.2))
    for key, label, colour in WAYS:
        ok = [(r["seq_len"], r["results"][key]) for r in reports if key in r["results"] and "error" not in r["results"][key]]
        failed = [(r["seq_len"], r["results"][key]) for r in reports if key in r["results"] and "error" in r["results"][key]]
        if ok:
            t = np.array([x for x, _ in ok])
            rss = np.array([v["peak_rss_gib"] for _, v in ok])
            secs = np.array([v.get("inner_s", v["wall_s"]) if key != "asa-analyze" else v["wall_s"] for _, v in ok])
            ax_mem.plot(t, rss, "o-", color=colour, label=label)
            ax_time.plot(t, secs, "o-", color=colour, label=label)
            if len(t) >= 2:
                slope = np.polyfit(t / 1024, rss, 1)[0]
                print(f"{label}: peak RSS slope {slope:.4f} GiB per 1k tokens over T = {list(t)}")
        for t, v in failed:
            ax_mem.plot([t], [v["peak_rss_gib"]], "x", color=colour, markersize=10, mew=2,
                        label=f"{label}: out of memory at T = {t}")
    for ax, title, unit in ((ax_mem, "Peak memory", "peak RSS (GiB)"), (ax_time, "Time", "seconds")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length T (tokens)")
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.set_xticks([r["seq_len"] for r in reports], [f"{r['seq_len'] // 1024}k" for r in reports])
        ax.grid(True, which="both", alpha=0.3)
    ax_mem.legend(fontsize=7, loc="upper left")
    fig.suptitle("SmolLM2-135M, f32, 1 sequence, 2 CPU cores (time: asa-analyze wall; transformers: forward only)", fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)


if __name__ == "__main__":
    main()
