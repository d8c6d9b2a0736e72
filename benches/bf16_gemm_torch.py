"""torch's CPU matmul (oneDNN) on the shapes of benches/bf16_gemm.rs, bf16 and f32, best of 5.

Prints one JSON object; benches/bf16_gemm.sh runs it beside the Rust bench.
"""
import json
import time

import torch

SHAPES = [(1024, 4096, 4096), (1024, 4096, 14336), (1024, 14336, 4096)]


def best_of(runs, f):
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - start)
    return best


def main():
    torch.manual_seed(0)
    rows = []
    for m, k, n in SHAPES:
        x = torch.rand(m, k) * 2 - 1
        w = torch.rand(n, k) * 2 - 1
        xb, wb = x.bfloat16(), w.bfloat16()
        # the activations are rounded inside the timing, as the Rust bench rounds them
        bf16_s = best_of(5, lambda: torch.nn.functional.linear(x.bfloat16(), wb))
        f32_s = best_of(5, lambda: torch.nn.functional.linear(x, w))
        flops = 2.0 * m * k * n
        rows.append({"m": m, "k": k, "n": n, "torch_bf16_s": round(bf16_s, 5),
                     "torch_bf16_gflops": round(flops / bf16_s / 1e9, 1),
                     "torch_f32_s": round(f32_s, 5), "torch_f32_gflops": round(flops / f32_s / 1e9, 1)})
        del xb
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(),
                      "mkldnn_bf16": torch.backends.mkldnn.is_available(), "gemm": rows}))


if __name__ == "__main__":
    main()
