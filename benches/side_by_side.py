"""Side-by-side benchmark: asa-analyze vs the transformers way, same checkpoint, same ids.

  python benches/side_by_side.py --model CKPT --seq-len 512 --num-seqs 10 --device cpu \
      --dtype float32 [--asa target/release/asa-analyze] [--runs 1] [--json-out results.json]

Runs, each in its own process: (a) `asa-analyze analyze --metrics <core set>`, (b)
benches/transformers_way.py --mode eager (output_attentions=True + metrics in torch),
(c) --mode sdpa (plain forward: the floor). Measures wall time, tokens/s, peak RSS  and on GPU peak device memory (nvidia-smi polled every 20 ms), and
checks that (a) and (b) agree on the metrics. Peak RSS comes from `/usr/bin/time -f %M`. Token ids: deterministic pseudo-random ids,
--ids FILE, or --text FILE (the text tokenised with the checkpoint's tokenizer.json and repeated as needed), written
once and given to all three. --mem-limit caps each process's address space (RLIMIT_AS), so a run that would exhaust the
machine fails with an allocation error that is recorded, instead of the kernel's OOM killer.
"""
import argparse
import json
import os
import random
import resource
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CORE = "first_token,weight_sum,entropy,head_total,nll"


def gpu_poller(pid_holder, peak, stop):
    while not stop.is_set():
        try:
            out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=5).stdout
            used = sum(int(line.split(",")[1]) for line in out.strip().splitlines() if line.strip())
            peak[0] = max(peak[0], used)
        except Exception:
            pass
        time.sleep(0.02)


def limit_memory(gib):
    """preexec_fn for a child: cap its address space at `gib` GiB (None: no cap)."""
    def apply():
        if gib:
            cap = int(gib * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    return apply


def text_ids(model, text_path, seq_len, num_seqs):
    """Token ids of `text_path` with the checkpoint's tokenizer.json, repeated to fill the windows."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
    ids = tok.encode(open(text_path, encoding="utf-8").read(), add_special_tokens=False).ids
    need = seq_len * num_seqs
    ids = (ids * (need // len(ids) + 1))[:need]
    return [ids[k * seq_len:(k + 1) * seq_len] for k in range(num_seqs)]


def error_line(err):
    """The most telling line of a failed child's stderr: its last error, else its exit status."""
    lines = [l.strip() for l in err.strip().splitlines() if l.strip()]
    for line in reversed(lines):
        if "Error" in line or "error:" in line or "Killed" in line:
            return line[:300]
    exits = [l for l in lines if l.startswith("Command ")]
    return (exits or lines or ["?"])[-1][:300]


def run(cmd, gpu, mem_limit=None):
    peak = [0]
    stop = threading.Event()
    poller = None
    if gpu:
        poller = threading.Thread(target=gpu_poller, args=(None, peak, stop), daemon=True)
        poller.start()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=limit_memory(mem_limit))
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    stop.set()
    if poller:
        poller.join()
    return out, err, wall, peak[0] / 1024.0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--num-seqs", type=int, default=10)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--asa", default=os.path.join(HERE, "..", "target", "release", "asa-analyze"))
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--ids")
    p.add_argument("--text", help="tokenise this text file (repeated as needed) instead of random ids")
    p.add_argument("--mem-limit", type=float, help="address-space cap per process, GiB")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--json-out")
    p.add_argument("--skip-eager", action="store_true")
    p.add_argument("--skip-sdpa", action="store_true", help="asa-analyze (and eager) only")
    p.add_argument("--asa-metrics", default=CORE, help="metrics for asa-analyze, or 'all' for the full suite")
    p.add_argument("--max-memory", help="asa-analyze --max-memory (e.g. 1G)")
    p.add_argument("--asa-dtype", help="asa-analyze's analysis dtype when it differs from --dtype (e.g. float32)")
    p.add_argument("--asa-extra", default="", help="more asa-analyze flags, e.g. '--stream-layers'")
    p.add_argument("--warmup", type=int, default=0,
                   help="untimed forward passes before the Python scripts' timed loop (asa-analyze is timed cold)")
    args = p.parse_args()
    kind = "text" if args.text else "ids"
    ids_path = args.ids or os.path.join("/tmp", f"bench_{kind}_{args.num_seqs}x{args.seq_len}.json")
    if args.text:
        json.dump(text_ids(args.model, args.text, args.seq_len, args.num_seqs), open(ids_path, "w"))
    elif not args.ids:
        cfg = json.load(open(os.path.join(args.model, "config.json")))
        rng = random.Random(0)
        ids = [[rng.randrange(cfg["vocab_size"]) for _ in range(args.seq_len)] for _ in range(args.num_seqs)]
        json.dump(ids, open(ids_path, "w"))
    gpu = args.device.startswith("cuda")
    asa_dtype = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}[args.asa_dtype or args.dtype]
    results = {}
    tokens = args.seq_len * args.num_seqs

    def timed(name, cmd):
        wrapped = ["/usr/bin/time", "-f", "%M", *cmd] if os.path.exists("/usr/bin/time") else cmd
        out, err, wall, gpu_gib = run(wrapped, gpu, args.mem_limit)
        rss = None
        if os.path.exists("/usr/bin/time"):
            try:
                rss = int(err.strip().splitlines()[-1]) / 2**20
            except Exception:
                rss = None
        results[name] = {"wall_s": wall, "tokens_per_s": tokens / wall, "peak_rss_gib": rss,
                         "peak_gpu_gib": gpu_gib if gpu else None}
        if "Command exited with non-zero status" in err or "Command terminated by signal" in err:
            results[name]["error"] = error_line(err)
        return out, err

    out, err = timed("asa-analyze", [args.asa, "analyze", args.model, "--corpus", ids_path, "--seq-len", str(args.seq_len),
                                      "--num-seqs", str(args.num_seqs), "--bos", "never",
                                      *([] if args.asa_metrics == "all" else ["--metrics", args.asa_metrics]),
                                      *(["--max-memory", args.max_memory] if args.max_memory else []),
                                      "--device", "cuda" if gpu else "cpu", "--dtype", asa_dtype,
                                      "--batch-size", str(args.batch_size), "--out", "/tmp/bench_asa_out",
                                      *args.asa_extra.split(), "--json", "--quiet"])
    try:
        asa = json.loads(out)["models"][0]["metrics"]
        # the analysis itself, model already loaded (as the Python scripts' inner_s)
        record = json.load(open("/tmp/bench_asa_out/run.json"))["models"][0]
        results["asa-analyze"]["inner_s"] = record["seconds"]
        results["asa-analyze"]["schedule"] = record.get("schedule", {}).get("taken")
    except Exception:
        print(out, err, file=sys.stderr)
        raise
    tw = os.path.join(HERE, "transformers_way.py")
    common = ["--model", args.model, "--ids", ids_path, "--device", "cuda" if gpu else "cpu", "--dtype", args.dtype,
              "--batch-size", str(args.batch_size), "--warmup", str(args.warmup)]
    if not args.skip_eager:
        out, err = timed("transformers eager + metrics", [args.python, tw, "--mode", "eager", *common])
        try:
            eager = json.loads(out.strip().splitlines()[-1])
            results["transformers eager + metrics"]["inner_s"] = eager["seconds"]
            diffs = {
                "first_token": max(abs(a - b) for a, b in zip(asa["first_token"]["mean"], eager["metrics"]["first_token"])),
                "weight_sum": max(abs(a["mean"] - b) for a, b in zip(asa["weight_sum"]["per_layer"], eager["metrics"]["weight_sum"])),
                "entropy": max(abs(a - b) for a, b in zip(asa["entropy"]["per_layer"]["mean"], eager["metrics"]["entropy"])),
                "head_total": max(abs(a - b) for ra, rb in zip(asa["weight_sum"]["head_total"], eager["metrics"]["head_total"]) for a, b in zip(ra, rb)),
                "nll": abs(asa["nll"]["mean"] - eager["metrics"]["nll"]),
            }
            results["agreement_max_abs_diff"] = diffs
        except Exception as e:
            results["transformers eager + metrics"]["error"] = error_line(err)
    if not args.skip_sdpa:
        out, err = timed("transformers sdpa forward (floor)", [args.python, tw, "--mode", "sdpa", *common])
        try:
            results["transformers sdpa forward (floor)"]["inner_s"] = json.loads(out.strip().splitlines()[-1])["seconds"]
        except Exception:
            results["transformers sdpa forward (floor)"]["error"] = error_line(err)
    report = {"model": args.model, "device": args.device, "dtype": args.dtype, "seq_len": args.seq_len,
              "num_seqs": args.num_seqs, "tokens": args.text or args.ids or "random ids",
              "mem_limit_gib": args.mem_limit, "asa_metrics": args.asa_metrics, "results": results}
    print(json.dumps(report, indent=1))
    if args.json_out:
        json.dump(report, open(args.json_out, "w"), indent=1)


if __name__ == "__main__":
    main()
