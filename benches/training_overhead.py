"""The cost of attention statistics while training (issue 38): a plain CPU training loop of a
~30M-parameter Llama, timed without a monitor, and with `asa.Monitor` every `--every` steps
on a probe batch (background thread, `threads` analysis threads); also the cost of one
snapshot (the weights copied to the host) and of one analysis alone.

    python benches/training_overhead.py --steps 200 --every 50 --threads 1

Prints one JSON line per configuration; BENCHMARKS.md records them with the machine."""

import argparse
import json
import os
import time

import numpy as np
import torch
import transformers

import asa_analyze as asa
from asa_analyze.monitor import _snapshot


def model_30m(seed=0):
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=8192, hidden_size=512, intermediate_size=1376, num_hidden_layers=6,
        num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512, tie_word_embeddings=False,
    )
    return transformers.LlamaForCausalLM(config)


def train(steps, batch, seq, monitor=None):
    """Wall seconds of `steps` AdamW steps (the same data and seed each time)."""
    model = model_30m()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    data = torch.from_numpy(np.random.default_rng(0).integers(0, 8192, size=(steps, batch, seq)))
    start = time.perf_counter()
    for step in range(1, steps + 1):
        ids = data[step - 1]
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if monitor is not None:
            monitor(model, step)
    if monitor is not None:
        monitor.wait()
    return time.perf_counter() - start, model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--probe", type=int, default=2, help="probe sequences (of --seq tokens)")
    ap.add_argument("--threads", default="1", help="comma-separated analysis thread counts; 'all' for every core")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each configuration, alternated")
    args = ap.parse_args()
    probe = np.random.default_rng(1).integers(0, 8192, size=(args.probe, args.seq))
    params = sum(p.numel() for p in model_30m().parameters())
    info = dict(params=params, steps=args.steps, every=args.every, batch=args.batch, seq=args.seq,
                probe=list(probe.shape), torch_threads=torch.get_num_threads(), cores=os.cpu_count())

    for repeat in range(args.repeats):
        base, model = train(args.steps, args.batch, args.seq)
        print(json.dumps({**info, "run": "no monitor", "repeat": repeat, "seconds": round(base, 2)}), flush=True)
        start = time.perf_counter()
        snap = _snapshot(model)
        snapshot_s = time.perf_counter() - start
        for threads in args.threads.split(","):
            n = None if threads == "all" else int(threads)
            start = time.perf_counter()
            asa.analyze({"model": snap}, corpus=probe, seq_len=args.seq, num_seqs=args.probe, progress=False,
                        metrics=list(asa.monitor.DEFAULT_METRICS), threads=n)
            alone = time.perf_counter() - start
            mon = asa.Monitor(probe=probe, every=args.every, threads=n)
            seconds, _ = train(args.steps, args.batch, args.seq, mon)
            analysed = sorted(set(mon.series["step"].to_list()))
            print(json.dumps({**info, "run": f"Monitor every {args.every}, threads={threads}", "repeat": repeat,
                              "seconds": round(seconds, 2), "overhead_pct": round(100 * (seconds / base - 1), 1),
                              "analysed_steps": analysed, "skipped": mon.skipped, "snapshot_s": round(snapshot_s, 3),
                              "analysis_alone_s": round(alone, 3)}), flush=True)

if __name__ == "__main__":
    main()
