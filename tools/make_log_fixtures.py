#!/usr/bin/env python3
"""Training-log fixtures for `tests/logs.rs` (issue 4, SPEC section 5).

Regenerate (from the repository root) with:

    ~/.cache/asa-tools/bin/python tools/make_log_fixtures.py

Needs numpy, scipy, tensorboard, tensorboardX and torch (made with Python 3.11.7,
numpy 2.4.6, scipy 1.17.1, tensorboard 2.21.0, tensorboardX 2.6.5, torch 2.15.0; CPU
only, about 5 s). Deterministic: fixed seed and wall times, so a rerun rewrites the
same bytes. Writes everything under
`tests/fixtures/logs/`: the logs in every supported format (CSV, TSV, JSON Lines, a
Weights & Biases CSV export, TensorBoard event files written by tensorboardX, by
torch.utils.tensorboard and by tensorboard's own EventFileWriter with TF2-style tensor
summaries), bad inputs, and `expected.json`.

`expected.json` holds the answers, computed here with numpy/scipy and never by the Rust
code: a list of cases, each a command line (without `--json`) and the rows the
`--json` output must contain. Rows are matched on their text and integer fields;
floats are compared with a tolerance. CI does not run this script: its outputs are
committed.

Conventions mirrored from SPEC section 5 (written independently of the Rust code):
- `--steps A..B` is half-open, `A..=B` closed; no window means every step.
- Per step, the last logged value wins (a resumed run overwrites); a step whose rows
  all have an empty cell for the metric counts once as missing. NaN, +inf and -inf
  are counted and excluded; the remaining finite values are the sample.
- Spikes: tau = median + k * mad_scale * MAD, MAD = median(|g - median(g)|) over the
  window; a spike is g > tau.
- Curves: debiased EMA (TensorBoard / W&B), run over every finite point of the run
  and then cut to the window.
"""

import json
import math
import os
import shutil
import struct
import time
from pathlib import Path

import numpy as np
import scipy.stats

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "logs"

# ----------------------------------------------------------------------------------
# Independent reference implementation of the section-5 statistics.
# ----------------------------------------------------------------------------------


def in_window(step, window):
    if window is None:
        return True
    lo, hi, inclusive = window
    if lo is not None and step < lo:
        return False
    if hi is not None and (step > hi if inclusive else step >= hi):
        return False
    return True


def clean(rows):
    """rows: list of (step, value) in file order, value None for an empty cell.

    Returns {step: (value or None, n_overwritten)}."""
    present = {}
    seen = set()
    for step, value in rows:
        seen.add(step)
        if value is not None:
            present.setdefault(step, []).append(value)
    out = {}
    for step in seen:
        vals = present.get(step, [])
        out[step] = (vals[-1], len(vals) - 1) if vals else (None, 0)
    return out


def sample(rows, window):
    cleaned = clean(rows)
    steps, values = [], []
    q = dict(n_missing=0, n_nan=0, n_inf=0, n_duplicate=0)
    for step in sorted(cleaned):
        if not in_window(step, window):
            continue
        value, dup = cleaned[step]
        q["n_duplicate"] += dup
        if value is None:
            q["n_missing"] += 1
        elif math.isnan(value):
            q["n_nan"] += 1
        elif math.isinf(value):
            q["n_inf"] += 1
        else:
            steps.append(step)
            values.append(value)
    q["n_excluded"] = q["n_missing"] + q["n_nan"] + q["n_inf"]
    return np.array(steps, dtype=np.int64), np.array(values, dtype=np.float64), q


def window_bounds(window):
    """(step_start, step_end) as exported: half-open, end None when open."""
    if window is None:
        return None, None
    lo, hi, inclusive = window
    if hi is not None and inclusive:
        hi = hi + 1
    return lo, hi


def grad_stats_row(run, metric, rows, window, ddof):
    _, g, q = sample(rows, window)
    lo, hi = window_bounds(window)
    std = float(np.std(g, ddof=ddof))
    return dict(
        run=run,
        metric=metric,
        step_start=lo,
        step_end=hi,
        n=int(g.size),
        ddof=ddof,
        mean=float(np.mean(g)),
        std=std,
        var=float(np.var(g, ddof=ddof)),
        cv=float(scipy.stats.variation(g, ddof=ddof)),
        **q,
    )


def spikes_rows(run, metric, rows, window, ks, mad_scale):
    steps, g, q = sample(rows, window)
    med = float(np.median(g))
    mad_raw = float(scipy.stats.median_abs_deviation(g, scale=1.0))
    lo, hi = window_bounds(window)
    out, out_steps = [], []
    for k in ks:
        tau = med + k * mad_scale * mad_raw
        # Counts must not depend on rounding: keep every value clear of tau.
        assert np.all(np.abs(g - tau) > 1e-9 * max(1.0, abs(tau))), (run, k, tau)
        hit = g > tau
        out.append(
            dict(
                run=run,
                metric=metric,
                k=float(k),
                mad_scale=float(mad_scale),
                median=med,
                mad=mad_scale * mad_raw,
                mad_raw=mad_raw,
                tau=tau,
                count=int(hit.sum()),
                n=int(g.size),
                step_start=lo,
                step_end=hi,
                **q,
            )
        )
        for s, v in zip(steps[hit], g[hit]):
            out_steps.append(dict(run=run, metric=metric, k=float(k), step=int(s), value=float(v)))
    return out, out_steps


def debiased_ema(values, weight):
    """Closed form: smoothed_t = sum_i w^(t-i) x_i / sum_i w^(t-i), i <= t."""
    out = np.empty_like(values)
    for t in range(values.size):
        w = weight ** np.arange(t, -1, -1, dtype=np.float64)
        out[t] = np.dot(w, values[: t + 1]) / w.sum()
    return out


def curve_rows(run, metric, rows, window, ema):
    steps, g, q = sample(rows, None)
    smoothed = g.copy() if ema is None else debiased_ema(g, ema)
    keep = np.array([in_window(int(s), window) for s in steps], dtype=bool)
    points = [
        dict(run=run, metric=metric, step=int(s), value=float(v), smoothed=float(m))
        for s, v, m in zip(steps[keep], g[keep], smoothed[keep])
    ]
    _, _, wq = sample(rows, window)
    summary = dict(run=run, metric=metric, points=int(keep.sum()), **wq)
    return points, summary


# ----------------------------------------------------------------------------------
# Writers.
# ----------------------------------------------------------------------------------


def scale_name(scale):
    """`1.4826` -> `1_4826`: case names are Rust test names."""
    return str(scale).replace(".", "_")


def fmt(v):
    if v is None:
        return ""
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    return str(v)


def write_delimited(path, header, rows, sep=","):
    with open(path, "w", newline="") as f:
        f.write(sep.join(header) + "\n")
        for row in rows:
            f.write(sep.join(fmt(v) for v in row) + "\n")


def rename_events(folder, names):
    """Give tfevents files stable names (the writer puts time and host name in them)."""
    files = sorted(p for p in folder.iterdir() if p.name.startswith("events.out.tfevents"))
    assert len(files) == len(names), files
    for p, name in zip(files, names):
        p.rename(folder / name)


def masked_crc32c(data):
    # Only used to double-check the corruption below really breaks the CRC.
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as m

    return m(data)


# ----------------------------------------------------------------------------------
# Fixtures.
# ----------------------------------------------------------------------------------


WALL = 1.7e9  # fixed wall time, so the event files are byte-identical run to run


def main():
    # The writers stamp their first event (file_version) with time.time().
    time.time = lambda: WALL
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    (OUT / "bad").mkdir()
    rng = np.random.default_rng(20261123)
    cases = []

    def case(name, args, **expect):
        cases.append(dict(name=name, args=args, expect=expect))

    # --- hand.csv: small enough to check by hand (arithmetic in tests/logs.rs). ---
    hand_g = [3.0, 4.0, 5.0, 5.0, 5.0, 6.0, 7.0, 12.0, 50.0]
    hand_loss = [4.0, 3.5, 3.0, 2.75, 2.5, 2.25, 2.0, 2.5, 3.0]
    write_delimited(
        OUT / "hand.csv",
        ["step", "loss", "grad_norm"],
        [(s, l, g) for s, (l, g) in enumerate(zip(hand_loss, hand_g))],
    )
    hand = [(s, g) for s, g in enumerate(hand_g)]
    hand_loss_rows = [(s, l) for s, l in enumerate(hand_loss)]
    for ddof in (0, 1):
        case(
            f"hand_grad_stats_ddof{ddof}",
            ["grad-stats", "hand.csv", "--steps", "0..7", "--ddof", str(ddof)],
            grad_stats=[grad_stats_row("hand", "grad_norm", hand, (0, 7, False), ddof)],
        )
    for scale in (1.0, 1.4826):
        rows, steps = spikes_rows("hand", "grad_norm", hand, None, [6, 9], scale)
        case(
            f"hand_spikes_scale{scale_name(scale)}",
            ["spikes", "hand.csv", "--k", "6,9", "--mad-scale", str(scale)],
            spikes=rows,
            spike_steps=steps,
        )

    # --- long.csv: 3000 steps, decaying noisy grad norm with planted spikes. ---
    n = 3000
    steps = np.arange(n)
    trend = 1.0 + 4.0 * np.exp(-steps / 100.0)
    g = trend * rng.lognormal(0.0, 0.1, n)
    # Planted spikes: between the unscaled and the scaled thresholds (so --mad-scale
    # changes the count) and far above both.
    for s, v in [(700, 1.5), (900, 1.52), (1300, 1.75), (1700, 1.78), (2100, 3.0), (2500, 4.2)]:
        g[s] = v
    loss = 2.5 + 8.0 * np.exp(-steps / 400.0) + rng.normal(0.0, 0.05, n)
    lr = np.minimum(1.0, (steps + 1) / 200.0) * 3e-4
    write_delimited(
        OUT / "long.csv",
        ["step", "train/loss", "train/grad_norm", "lr"],
        [(int(s), float(a), float(b), float(c)) for s, a, b, c in zip(steps, loss, g, lr)],
    )
    long_g = [(int(s), float(v)) for s, v in zip(steps, g)]
    long_loss = [(int(s), float(v)) for s, v in zip(steps, loss)]
    for ddof in (0, 1):
        case(
            f"long_grad_stats_ddof{ddof}",
            ["grad-stats", "long.csv", "--ddof", str(ddof)],
            grad_stats=[grad_stats_row("long", "grad_norm", long_g, (0, 500, False), ddof)],
        )
    for scale in (1.0, 1.4826):
        rows, st = spikes_rows("long", "grad_norm", long_g, (500, None, False), [6, 9], scale)
        case(
            f"long_spikes_scale{scale_name(scale)}",
            ["spikes", "long.csv", "--steps", "500..", "--mad-scale", str(scale)],
            spikes=rows,
            spike_steps=st,
        )
    rows, st = spikes_rows("long", "grad_norm", long_g, (0, 500, False), [3, 4.5], 1.0)
    case(
        "long_spikes_window",
        ["spikes", "long.csv", "--steps", "0..500", "--k", "3,4.5"],
        spikes=rows,
        spike_steps=st,
    )
    pts_l, sum_l = curve_rows("long", "loss", long_loss, (1000, 1100, True), 0.9)
    pts_g, sum_g = curve_rows("long", "grad_norm", long_g, (1000, 1100, True), 0.9)
    case(
        "long_curves_ema",
        ["curves", "long.csv", "--ema", "0.9", "--steps", "1000..=1100"],
        curves=pts_l + pts_g,
        curve_summary=[sum_l, sum_g],
    )

    # --- noisy.csv: NaN, inf, -inf, empty cells, duplicates, steps out of order,
    # Lightning-style rows that log another metric at the same step. ---
    nrows = []
    vals = rng.uniform(0.5, 1.5, 40)
    order = list(range(40))
    order[12:18] = [15, 13, 17, 12, 16, 14]  # out of order
    for s in order:
        v = float(vals[s])
        if s == 5:
            v = float("nan")
        if s == 7:
            v = float("inf")
        if s == 8:
            v = float("-inf")
        if s in (9, 11):
            v = None
        nrows.append((s, v, 2.0 + 0.01 * s))
    nrows.append((20, None, 9.0))  # another metric logged at step 20: not a missing grad_norm
    nrows.append((30, 0.123, 2.3))  # duplicate of step 30, later: wins
    nrows.append((25, float("nan"), 2.25))  # duplicate of 25, later and NaN: wins, excluded
    nrows.append((11, None, 2.11))  # step 11 stays missing (counted once)
    nrows.append((50, None, 2.5))  # a step with no grad_norm at all
    write_delimited(OUT / "noisy.csv", ["step", "grad_norm", "loss"], nrows)
    noisy = [(s, v) for s, v, _ in nrows]
    for ddof in (0, 1):
        case(
            f"noisy_grad_stats_ddof{ddof}",
            ["grad-stats", "noisy.csv", "--steps", "0..=50", "--ddof", str(ddof)],
            grad_stats=[grad_stats_row("noisy", "grad_norm", noisy, (0, 50, True), ddof)],
        )
    rows, st = spikes_rows("noisy", "grad_norm", noisy, None, [1, 2], 1.0)
    case("noisy_spikes", ["spikes", "noisy.csv", "--k", "1,2"], spikes=rows, spike_steps=st)

    # --- run.tsv: tab-separated, `iteration` step column, `gradient_norm` alias. ---
    tsv_g = rng.gamma(4.0, 0.25, 120)
    write_delimited(
        OUT / "run.tsv",
        ["iteration", "gradient_norm", "loss"],
        [(i * 10, float(v), 3.0 - 0.01 * i) for i, v in enumerate(tsv_g)],
        sep="\t",
    )
    tsv = [(i * 10, float(v)) for i, v in enumerate(tsv_g)]
    case(
        "tsv_grad_stats",
        ["grad-stats", "mytsv=run.tsv", "--steps", "100..900"],
        grad_stats=[grad_stats_row("mytsv", "grad_norm", tsv, (100, 900, False), 1)],
    )

    # --- nested.jsonl: nested keys, eval lines without the metric, NaN/Infinity
    # literals (Python's json.dumps), a null. ---
    jl = []
    j_g, j_loss = [], []
    with open(OUT / "nested.jsonl", "w") as f:
        for s in range(0, 400, 2):
            gv = float(rng.lognormal(0.0, 0.3))
            lv = float(5.0 * math.exp(-s / 150.0) + 1.0)
            if s == 40:
                gv = float("nan")
            if s == 60:
                gv = float("inf")
            if s == 100:
                gv = None
            if s in (150, 300):
                gv = 25.0
            obj = {"step": s, "train": {"loss": lv, "grad_norm": gv, "lr": 1e-3}}
            f.write(json.dumps(obj) + "\n")
            j_g.append((s, gv))
            j_loss.append((s, lv))
            if s % 50 == 0:
                f.write(json.dumps({"step": s, "eval": {"loss": lv + 0.1}}) + "\n")
        f.write("\n")  # a trailing blank line is fine
    rows, st = spikes_rows("nested", "grad_norm", j_g, None, [6, 9], 1.0)
    case("jsonl_spikes", ["spikes", "nested.jsonl"], spikes=rows, spike_steps=st)
    case(
        "jsonl_grad_stats_dotted",
        ["grad-stats", "nested.jsonl", "--metric", "train.grad_norm", "--steps", "0..=398"],
        grad_stats=[grad_stats_row("nested", "grad_norm", j_g, (0, 398, True), 1)],
    )
    pts, summ = curve_rows("nested", "eval/loss", [(s, l + 0.1) for s, l in j_loss if s % 50 == 0], None, 0.6)
    case(
        "jsonl_curves_eval",
        ["curves", "nested.jsonl", "--metric", "eval/loss", "--ema", "0.6"],
        curves=pts,
        curve_summary=[summ],
    )

    # --- wandb_export.csv: two runs, __MIN/__MAX columns, runs with different steps. ---
    wsteps = list(range(0, 1000, 5))
    w = {
        "softmax": {s: float(v) for s, v in zip(wsteps, rng.lognormal(0.2, 0.4, len(wsteps)))},
        "asa-1b": {s: float(v) for s, v in zip(wsteps[:150], rng.lognormal(0.0, 0.2, 150))},
    }
    wl = {run: {s: 3.0 + 1.0 / (1 + s) for s in d} for run, d in w.items()}
    header = ["Step"]
    for run in w:
        for m in ("train/grad_norm", "train/loss"):
            header += [f"{run} - {m}", f"{run} - {m}__MIN", f"{run} - {m}__MAX"]
    with open(OUT / "wandb_export.csv", "w", newline="") as f:
        f.write(",".join(f'"{h}"' for h in header) + "\n")
        for s in wsteps:
            cells = [str(s)]
            for run in w:
                for d in (w[run], wl[run]):
                    v = d.get(s)
                    cells += ["" if v is None else repr(v)] + ["" if v is None else repr(v * 0.9)] + ["" if v is None else repr(v * 1.1)]
            f.write(",".join(f'"{c}"' for c in cells) + "\n")
    wrows = []
    for run in w:
        wrows.append(grad_stats_row(run, "grad_norm", sorted(w[run].items()), (0, 500, False), 0))
    case("wandb_grad_stats", ["grad-stats", "wandb_export.csv", "--ddof", "0"], grad_stats=wrows)
    wsp, wst = [], []
    for run in w:
        r, s_ = spikes_rows(f"exp/{run}", "grad_norm", sorted(w[run].items()), None, [2.5], 1.4826)
        wsp += r
        wst += s_
    case(
        "wandb_spikes_labelled",
        ["spikes", "exp=wandb_export.csv", "--k", "2.5", "--mad-scale", "1.4826"],
        spikes=wsp,
        spike_steps=wst,
    )

    # --- TensorBoard: tensorboardX, resumed run in two files, plus a histogram. ---
    from tensorboardX import SummaryWriter as TbxWriter

    tbx = OUT / "tb_tbx"
    tb_g, tb_loss = [], []
    first = {s: float(v) for s, v in zip(range(0, 200), 1.0 + rng.gamma(2.0, 0.2, 200))}
    second = {s: float(v) for s, v in zip(range(150, 300), 1.0 + rng.gamma(2.0, 0.2, 150))}
    second[222] = 9.0
    second[280] = 12.0
    first[33] = 7.5
    for part, data in ((1, first), (2, second)):
        wr = TbxWriter(str(tbx), filename_suffix=f".part{part}")
        for s, v in sorted(data.items()):
            wr.add_scalar("train/grad_norm", v, s, walltime=WALL + s)
            wr.add_scalar("train/loss", 4.0 - s / 100.0, s, walltime=WALL + s)
            # tensorboardX stores simple_value as float32.
            tb_g.append((s, float(np.float32(v))))
            tb_loss.append((s, float(np.float32(4.0 - s / 100.0))))
            if s % 100 == 0:
                wr.add_histogram("weights", rng.normal(size=64), s, walltime=WALL + s)
        wr.close()
    rename_events(tbx, ["events.out.tfevents.1700000000.fixture.1", "events.out.tfevents.1700000100.fixture.2"])
    rows, st = spikes_rows("tb_tbx", "grad_norm", tb_g, None, [6, 9], 1.0)
    case("tbx_spikes", ["spikes", "tb_tbx"], spikes=rows, spike_steps=st)
    case(
        "tbx_grad_stats",
        ["grad-stats", "tb_tbx", "--steps", "100..250"],
        grad_stats=[grad_stats_row("tb_tbx", "grad_norm", tb_g, (100, 250, False), 1)],
    )

    # --- TensorBoard: torch.utils.tensorboard, one file, bare tag names. ---
    from torch.utils.tensorboard import SummaryWriter as TorchWriter

    tt = OUT / "tb_torch"
    wr = TorchWriter(str(tt))
    tt_g, tt_loss = [], []
    for s in range(0, 600, 3):
        gv = float(rng.lognormal(0.0, 0.25))
        if s == 300:
            gv = 6.0
        lv = float(3.0 + math.exp(-s / 200.0))
        wr.add_scalar("grad_norm", gv, s, walltime=WALL + s)
        wr.add_scalar("loss", lv, s, walltime=WALL + s)
        tt_g.append((s, gv))
        tt_loss.append((s, lv))
    wr.close()
    rename_events(tt, ["events.out.tfevents.1700000200.fixture.0"])
    # Scalars go through float32 on disk.
    tt_g32 = [(s, float(np.float32(v))) for s, v in tt_g]
    tt_l32 = [(s, float(np.float32(v))) for s, v in tt_loss]
    pts_l, sum_l = curve_rows("torch", "loss", tt_l32, (300, 450, False), 0.8)
    pts_g, sum_g = curve_rows("torch", "grad_norm", tt_g32, (300, 450, False), 0.8)
    case(
        "torch_curves",
        ["curves", "torch=tb_torch", "--steps", "300..450", "--ema", "0.8"],
        curves=pts_l + pts_g,
        curve_summary=[sum_l, sum_g],
    )
    rows, st = spikes_rows("torch", "grad_norm", tt_g32, None, [6, 9], 1.0)
    case("torch_spikes_file", ["spikes", "torch=tb_torch/events.out.tfevents.1700000200.fixture.0"], spikes=rows, spike_steps=st)

    # --- TensorBoard: TF2-style tensor summaries through tensorboard's own writer. ---
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    tten = OUT / "tb_tensor"
    ew = EventFileWriter(str(tten))
    ten_g = []
    for s in range(0, 100):
        gv = float(np.float32(rng.lognormal(0.0, 0.2)))
        if s == 77:
            gv = 5.0
        ten_g.append((s, gv))
        md = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
        if s % 2 == 0:  # float_val
            t = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape=tensor_shape_pb2.TensorShapeProto(), float_val=[gv])
        else:  # packed tensor_content, as tf.summary writes
            t = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape=tensor_shape_pb2.TensorShapeProto(), tensor_content=struct.pack("<f", gv))
        summ = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="gradient_norm", tensor=t, metadata=md)])
        ew.add_event(event_pb2.Event(step=s, wall_time=WALL + s, summary=summ))
    ew.close()
    rename_events(tten, ["events.out.tfevents.1700000300.fixture.0"])
    rows, st = spikes_rows("tb_tensor", "grad_norm", ten_g, None, [6, 9], 1.0)
    case("tensor_spikes", ["spikes", "tb_tensor"], spikes=rows, spike_steps=st)

    # --- Several runs in one command, labels from file and folder names. ---
    case(
        "multi_grad_stats",
        ["grad-stats", "hand.csv", "long.csv", "tb_tbx", "--steps", "0..=8"],
        grad_stats=[
            grad_stats_row("hand", "grad_norm", hand, (0, 8, True), 1),
            grad_stats_row("long", "grad_norm", long_g, (0, 8, True), 1),
            grad_stats_row("tb_tbx", "grad_norm", tb_g, (0, 8, True), 1),
        ],
    )

    # --- A corrupted event file: one payload byte flipped, so its data CRC fails. ---
    bad_tb = OUT / "bad" / "tb_corrupt"
    bad_tb.mkdir()
    src = tt / "events.out.tfevents.1700000200.fixture.0"
    data = bytearray(src.read_bytes())
    # Walk the records and flip a byte in the payload of the 10th.
    off = 0
    for _ in range(9):
        (length,) = struct.unpack("<Q", data[off : off + 8])
        off += 12 + length + 4
    (length,) = struct.unpack("<Q", data[off : off + 8])
    payload = bytes(data[off + 12 : off + 12 + length])
    data[off + 12 + length // 2] ^= 0x40
    assert masked_crc32c(bytes(data[off + 12 : off + 12 + length])) != masked_crc32c(payload)
    (bad_tb / "events.out.tfevents.1700000400.fixture.0").write_bytes(bytes(data))

    # --- Other bad inputs. ---
    (OUT / "bad" / "empty.csv").write_text("")
    (OUT / "bad" / "header_only.csv").write_text("step,grad_norm,loss\n")
    write_delimited(OUT / "bad" / "all_nan.csv", ["step", "grad_norm"], [(s, float("nan")) for s in range(10)])
    write_delimited(OUT / "bad" / "no_metric.csv", ["step", "lr", "loss"], [(s, 1e-3, 2.0) for s in range(10)])
    (OUT / "bad" / "garbage.csv").write_text("step,grad_norm\n0,1.0\n1,abc\n")
    (OUT / "bad" / "empty.jsonl").write_text("\n\n")
    (OUT / "bad" / "broken.jsonl").write_text('{"step": 0, "grad_norm": 1.0}\n{"step": 1, "grad_norm": \n')
    (OUT / "bad" / "ambiguous.csv").write_text("step,train/grad_norm,gradient_norm\n0,1.0,1.0\n")
    # a row with a value the header has no column for (a trailing delimiter is fine)
    (OUT / "bad" / "extra_field.csv").write_text("step,grad_norm\n0,1.0,\n1,2.0,7\n2,3.0\n")
    (OUT / "bad" / "duplicate_column.csv").write_text("step,grad_norm,lr,grad_norm\n0,1.0,0.1,2.0\n")

    with open(OUT / "expected.json", "w") as f:
        json.dump(dict(generated_by="tools/make_log_fixtures.py", cases=cases), f, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {OUT.relative_to(ROOT)}/expected.json")


if __name__ == "__main__":
    main()
