"""`asa.capture` against the same forward with SDPA (issue 64): a SmolLM2-135M-shaped
transformers Llama (30 layers, hidden 576, 9 heads / 3 kv, random weights), one sequence of
`--tokens` tokens, CPU. Each configuration runs in a process of its own (so that its peak
RSS is its own): a warm-up forward, then `--repeat` timed forwards, the best kept.

    python benches/capture.py --tokens 4096 --dtype float32 bfloat16

Configurations: `sdpa` (transformers' SDPA forward, no statistics), `capture` (the same
forward inside `asa.capture`, every default metric, the Rust kernels computing attention and
statistics, and the result's tables made) and `capture_torch` (the capture's torch path,
what a GPU runs, here on the CPU). All keep the last position's logits only. `--repeat 0`
times one cold forward (no warm-up).
Prints one JSON line per configuration; BENCHMARKS.md records them with the machine."""

import argparse
import json
import os
import resource
import subprocess
import sys
import time


def model(dtype):
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=32768,
        rope_theta=100000.0, tie_word_embeddings=True,
    )
    m = transformers.LlamaForCausalLM(config).eval()
    return m.to(getattr(torch, dtype))


def one(kind, tokens, dtype, repeat):
    """Best wall seconds of `repeat` forwards of configuration `kind`, and peak RSS."""
    import torch

    import asa_analyze as asa

    m = model(dtype)
    ids = torch.randint(3, 49152, (1, tokens), generator=torch.Generator().manual_seed(1))
    best = float("inf")
    for k in range(repeat + 1):
        start = time.perf_counter()
        with torch.no_grad():
            if kind.startswith("capture"):
                path = "torch" if kind == "capture_torch" else "auto"
                with asa.capture(m, path=path) as cap:
                    m(input_ids=ids, use_cache=False, logits_to_keep=1)
                cap.result()
            else:
                m(input_ids=ids, use_cache=False, logits_to_keep=1)
        if k > 0 or repeat == 0:  # the first is the warm-up (none with --repeat 0)
            best = min(best, time.perf_counter() - start)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"config": kind, "tokens": tokens, "dtype": dtype, "seconds": round(best, 3),
            "peak_rss_gib": round(rss / 2**30, 3), "threads": torch.get_num_threads()}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, nargs="+", default=[4096])
    p.add_argument("--dtype", nargs="+", default=["float32"])
    p.add_argument("--configs", nargs="+", default=["sdpa", "capture"])
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        kind, tokens, dtype = a.one
        print(json.dumps(one(kind, int(tokens), dtype, a.repeat)), flush=True)
        return
    for tokens in a.tokens:
        for dtype in a.dtype:
            for kind in a.configs:
                out = subprocess.run([sys.executable, __file__, "--repeat", str(a.repeat), "--one", kind, str(tokens), dtype],
                                     capture_output=True, text=True, env=os.environ)
                line = out.stdout.strip().splitlines()[-1] if out.returncode == 0 else json.dumps(
                    {"config": kind, "tokens": tokens, "dtype": dtype, "error": out.stderr.strip().splitlines()[-1:]})
                print(line, flush=True)


if __name__ == "__main__":
    main()
