"""The way researchers measure attention today, for side-by-side benchmarks with asa-analyze.

Modes (one per process, so peak memory is the mode's own):
  eager  transformers with attn_implementation="eager" and output_attentions=True, the core
         metrics computed in torch from the returned [batch, heads, T, T] maps
  sdpa   a plain transformers SDPA forward pass (logits only): the floor

Usage:
  python benches/transformers_way.py --model CKPT --ids windows.json --mode eager \
      --device cpu|cuda --dtype float32|bfloat16 [--batch-size 1] [--metrics-out m.json]
  python benches/transformers_way.py --make-random DIR --shape 1b|smollm2|30m   # writes a checkpoint

Prints one JSON line: mode, seconds, tokens_per_second, peak memory (RSS on CPU from
ru_maxrss, device memory on GPU from torch.cuda.max_memory_allocated), and the metrics.
Metric definitions follow SPEC section 4 (min_query 1: query 0 left out of query averages).
"""
import argparse
import json
import resource
import sys
import time

import torch

SHAPES = {
    # Llama-3.2-1B shape (random weights)
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072, tie_word_embeddings=True,
               rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    # SmolLM2-135M shape (random weights), positions up to 32k
    "smollm2": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                    num_key_value_heads=3, vocab_size=49152, max_position_embeddings=32768, tie_word_embeddings=True,
                    rope_theta=100000.0),
    # about 30M parameters
    "30m": dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=8, num_attention_heads=8,
                num_key_value_heads=4, vocab_size=8192, max_position_embeddings=2048, tie_word_embeddings=True),
}


def make_random(out, shape, dtype):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(**SHAPES[shape], initializer_range=0.02)
    # initialise on the GPU when there is one: a 1B model inits in seconds there
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = LlamaForCausalLM(cfg)
    model = model.to(getattr(torch, dtype)).cpu()
    model.save_pretrained(out)
    n = sum(p.numel() for p in model.parameters())
    print(json.dumps({"made": out, "shape": shape, "parameters": n}))


def peak_memory(device):
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB


def core_metrics(attentions, logits, ids, acc):
    """Accumulate first_token, weight_sum, entropy, head_total and nll from full maps."""
    for l, a in enumerate(attentions):
        a = a.double()
        rows = a[:, :, 1:, :]  # queries >= 1
        acc.setdefault("first_token", [0.0] * len(attentions))
        acc.setdefault("entropy", [0.0] * len(attentions))
        acc.setdefault("weight_sum", [0.0] * len(attentions))
        acc.setdefault("head_total", [[0.0] * a.shape[1] for _ in attentions])
        acc["first_token"][l] += rows[..., 0].sum().item()
        sums = rows.sum(-1)
        acc["weight_sum"][l] += sums.sum().item()
        for h, v in enumerate(sums.sum(dim=(0, 2)).tolist()):
            acc["head_total"][l][h] += v
        q = rows.clamp(min=0)
        q = q / q.sum(-1, keepdim=True)
        ent = -(q * torch.log(q.clamp(min=1e-300))).sum(-1)
        acc["entropy"][l] += ent.sum().item()
        acc["cells"] = acc.get("cells", 0) + 0  # counted below
    b, t = ids.shape
    lp = torch.log_softmax(logits[:, :-1].double(), -1)
    nll = -lp.gather(-1, ids[:, 1:, None]).squeeze(-1)
    acc["nll_sum"] = acc.get("nll_sum", 0.0) + nll.sum().item()
    acc["nll_count"] = acc.get("nll_count", 0) + nll.numel()
    acc["rows"] = acc.get("rows", 0) + b * (t - 1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model")
    p.add_argument("--ids")
    p.add_argument("--mode", choices=["eager", "sdpa"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--make-random")
    p.add_argument("--shape", default="30m")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--warmup", type=int, default=0, help="untimed forward passes before the timed ones")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.make_random:
        make_random(args.make_random, args.shape, args.dtype)
        return
    from transformers import AutoModelForCausalLM
    dtype = getattr(torch, args.dtype)
    impl = "eager" if args.mode == "eager" else "sdpa"
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, attn_implementation=impl).to(args.device)
    model.eval()
    windows = torch.tensor(json.load(open(args.ids)), dtype=torch.long)
    heads = model.config.num_attention_heads
    with torch.no_grad():
        # untimed passes first: CUDA context, kernel loading and autotuning are not counted
        for _ in range(args.warmup):
            model(windows[:args.batch_size].to(args.device), output_attentions=args.mode == "eager")
    if args.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    acc = {}
    start = time.perf_counter()
    with torch.no_grad():
        for i in range(0, len(windows), args.batch_size):
            ids = windows[i:i + args.batch_size].to(args.device)
            if args.mode == "eager":
                out = model(ids, output_attentions=True)
                core_metrics(out.attentions, out.logits, ids, acc)
            else:
                out = model(ids)
                _ = out.logits[:, -1].float().sum().item()
            del out
    if args.device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    result = {"mode": args.mode, "device": args.device, "dtype": args.dtype, "seconds": seconds,
              "tokens_per_second": windows.numel() / seconds, "peak_gib": peak_memory(args.device),
              "sequences": len(windows), "seq_len": windows.shape[1]}
    if args.mode == "eager":
        rows = acc["rows"]
        result["metrics"] = {
            "first_token": [v / (rows * heads) for v in acc["first_token"]],
            "weight_sum": [v / (rows * heads) for v in acc["weight_sum"]],
            "entropy": [v / (rows * heads) for v in acc["entropy"]],
            "head_total": [[v / rows for v in hs] for hs in acc["head_total"]],
            "nll": acc["nll_sum"] / acc["nll_count"],
        }
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
