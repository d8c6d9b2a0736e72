"""The cost of attention statistics while a model trains sharded (issue 53): the training loop
of benches/training_overhead.py (a 25.8M-parameter Llama, AdamW) on 2 ranks (torchrun, gloo,
CPU, one thread a rank), under DDP or FSDP, timed without a monitor and with `asa.Monitor`
every `--every` steps called on both ranks (rank 0 analyses on one thread of its own).

    torchrun --nproc_per_node 2 --standalone benches/training_overhead_distributed.py \\
        --mode ddp --steps 100 --every 50 [--with-monitor]

Rank 0 prints one JSON line: wall seconds of the loop, the analysed steps, the skipped
requests and each gather's seconds and bytes. BENCHMARKS.md records the runs with the machine.
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from training_overhead import model_30m  # noqa: E402

import asa_analyze as asa  # noqa: E402


def wrap(model, mode):
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model)
    from torch.distributed.fsdp import FullyShardedDataParallel

    return FullyShardedDataParallel(model, device_id=torch.device("cpu"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["ddp", "fsdp"], default="ddp")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--batch", type=int, default=4, help="sequences a rank")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--with-monitor", dest="monitor", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = wrap(model_30m(), args.mode)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    rng = np.random.default_rng(rank)
    data = torch.from_numpy(rng.integers(0, 8192, size=(args.steps, args.batch, args.seq)))
    probe = np.random.default_rng(7).integers(0, 8192, size=(2, args.seq))
    mon = asa.Monitor(probe=probe, every=args.every, threads=1) if args.monitor else None
    dist.barrier()
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        ids = data[step - 1]
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if mon is not None:
            mon(model, step)
    if mon is not None:
        mon.wait()
    dist.barrier()
    wall = time.perf_counter() - start
    if rank == 0:
        record = {"mode": args.mode, "monitor": args.monitor, "steps": args.steps, "every": args.every,
                  "wall_s": round(wall, 2)}
        if mon is not None:
            record.update(analysed=sorted(set(mon.series["step"].to_list())), skipped=mon.skipped,
                          gathers=[{"step": g["step"], "ms": round(1000 * g["seconds"], 1), "MB": round(g["bytes"] / 1e6, 1)}
                                   for g in mon.gathers])
        print(json.dumps(record), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
