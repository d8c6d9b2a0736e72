"""`asa.capture` against the same forward with SDPA (issues 64 and 63): a transformers Llama
with random weights, SmolLM2-135M's shape (30 layers, hidden 576, 9 heads / 3 kv) or with
`--shape 1b` Llama-3.2-1B's (16 layers, hidden 2048, 32 heads / 8 kv), one sequence of
`--tokens` tokens on `--device` (cpu, or cuda). Each configuration runs in a process of its
own (so that its peak RSS and device memory are its own): a warm-up forward, then `--repeat`
timed forwards, the best kept (on a GPU the clock stops after the device is done).

    python benches/capture.py --tokens 4096 --dtype float32 bfloat16
    python benches/capture.py --device cuda --shape 1b --dtype bfloat16 --configs sdpa flash capture

Configurations: `sdpa` (transformers' SDPA forward, no statistics), `flash` (the same with
FlashAttention 2, where the flash_attn package is installed; an error line where not),
`capture` (the same forward inside `asa.capture`, every default metric or `--metrics`, and
the result's tables made: the Rust kernels on the CPU, torch's blocks on a GPU) and
`capture_torch` (the capture's torch path, what a GPU runs, on any device). All keep the last
position's logits only. `--repeat 0` times one cold forward (no warm-up).
Prints one JSON line per configuration; BENCHMARKS.md records them with the machine."""

import argparse
import json
import os
import resource
import subprocess
import sys
import time


# the model shapes: SmolLM2-135M's and Llama-3.2-1B's (the GPU targets of issue 63)
SHAPES = {
    "smollm2": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, rope_theta=100000.0),
    "1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
               num_attention_heads=32, num_key_value_heads=8, rope_theta=500000.0),
}


def model(shape, dtype, device, attention):
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(**SHAPES[shape], max_position_embeddings=32768, tie_word_embeddings=True)
    with torch.device(device):
        m = transformers.LlamaForCausalLM(config).to(getattr(torch, dtype)).eval()
    if attention != "sdpa":
        m.set_attn_implementation(attention)
    return m


def one(kind, tokens, dtype, repeat, shape="smollm2", device="cpu", metrics=None):
    """Best wall seconds of `repeat` forwards of configuration `kind`, peak RSS, and on a GPU
    the peak device memory of the timed forwards."""
    import torch

    import asa_analyze as asa

    m = model(shape, dtype, device, "flash_attention_2" if kind == "flash" else "sdpa")
    vocab = SHAPES[shape]["vocab_size"]
    ids = torch.randint(3, vocab, (1, tokens), generator=torch.Generator().manual_seed(1)).to(device)
    gpu = torch.device(device).type == "cuda"
    options = {} if metrics is None else {"metrics": metrics}
    best = float("inf")
    for k in range(repeat + 1):
        if gpu and k == min(1, repeat):  # the peak of the timed forwards only
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        with torch.no_grad():
            if kind.startswith("capture"):
                path = "torch" if kind == "capture_torch" else "auto"
                with asa.capture(m, path=path, **options) as cap:
                    m(input_ids=ids, use_cache=False, logits_to_keep=1)
                cap.result()
            else:
                m(input_ids=ids, use_cache=False, logits_to_keep=1)
        if gpu:
            torch.cuda.synchronize()
        if k > 0 or repeat == 0:  # the first is the warm-up (none with --repeat 0)
            best = min(best, time.perf_counter() - start)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out = {"config": kind, "shape": shape, "device": device, "tokens": tokens, "dtype": dtype,
           "seconds": round(best, 3), "peak_rss_gib": round(rss / 2**30, 3), "threads": torch.get_num_threads()}
    if gpu:
        out["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
        out["gpu"] = torch.cuda.get_device_name()
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, nargs="+", default=[4096])
    p.add_argument("--dtype", nargs="+", default=["float32"])
    p.add_argument("--configs", nargs="+", default=["sdpa", "capture"],
                   choices=["sdpa", "flash", "capture", "capture_torch"])
    p.add_argument("--shape", choices=sorted(SHAPES), default="smollm2")
    p.add_argument("--device", default="cpu")
    p.add_argument("--metrics", nargs="+", help="the capture's metrics (default: its default set)")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        kind, tokens, dtype = a.one
        print(json.dumps(one(kind, int(tokens), dtype, a.repeat, a.shape, a.device, a.metrics)), flush=True)
        return
    same = ["--repeat", str(a.repeat), "--shape", a.shape, "--device", a.device] + (["--metrics", *a.metrics] if a.metrics else [])
    for tokens in a.tokens:
        for dtype in a.dtype:
            for kind in a.configs:
                out = subprocess.run([sys.executable, __file__, *same, "--one", kind, str(tokens), dtype],
                                     capture_output=True, text=True, env=os.environ)
                line = out.stdout.strip().splitlines()[-1] if out.returncode == 0 else json.dumps(
                    {"config": kind, "shape": a.shape, "device": a.device, "tokens": tokens, "dtype": dtype,
                     "error": out.stderr.strip().splitlines()[-1:]})
                print(line, flush=True)


if __name__ == "__main__":
    main()
