#!/usr/bin/env bash
# Issue 52: what per-layer attention kinds (KeyWindow with chunks, NoPE, temperature, the
# routing refactor) cost the paths that existed before them. One random Llama checkpoint
# (tools/make_random_checkpoint.py --shape small: 8 layers, hidden 1024, 16 / 4 heads), one
# 4096-token window, every default metric, f32, CPU, run by two binaries in turns: BEFORE (a
# build of the commit before the change) and AFTER (this checkout), full causal and as a
# Mistral config with a 1024-key sliding window; then the same weights as a chunked / NoPE
# config (llama4_text, AFTER only: the mixed layer kinds).
#
#   PY=python-with-numpy benches/layer_kinds.sh BEFORE_BINARY [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
BEFORE=$1
PY=${PY:-python3}  # with numpy
RUNS=${2:-3}
AFTER=target/release/asa-analyze
work=target/bench-layer-kinds
rm -rf "$work" && mkdir -p "$work"
"$PY" tools/make_random_checkpoint.py --shape small --out "$work/full" > /dev/null
cp tests/fixtures/models/llama_gqa/tokenizer.json "$work/full/"
mkdir -p "$work/window" "$work/chunked"
for d in window chunked; do
  for f in "$work"/full/*.safetensors* "$work/full/tokenizer.json"; do ln -s "$(realpath "$f")" "$work/$d/"; done
done
"$PY" - "$work" <<'PYEOF'
import json, sys
w = sys.argv[1]
c = json.load(open(f"{w}/full/config.json"))
json.dump({**c, "model_type": "mistral", "sliding_window": 1024}, open(f"{w}/window/config.json", "w"))
# Llama 4's attention on the same weights: RoPE on interleaved pairs, layers 1-3 and 5-7
# chunked by 1024 with an L2 QK-norm, layers 4 and 8 NoPE with temperature tuning; the
# dense MLP stored under Llama's names (a stored name the built-in map does not rename keeps
# its own)
l4 = {**c, "model_type": "llama4_text", "attention_chunk_size": 1024, "moe_layers": [],
      "intermediate_size_mlp": c["intermediate_size"], "floor_scale": 512, "attn_scale": 0.1}
json.dump(l4, open(f"{w}/chunked/config.json", "w"))
PYEOF
run() { # label binary folder [extra args]
  local label=$1 bin=$2 dir=$3; shift 3
  local out="$work/out-$label"
  rm -rf "$out"
  /usr/bin/time -f "%e s %M KiB" "$bin" analyze "$dir" --seq-len 4096 --num-seqs 1 --dtype f32 \
    --quiet --out "$out" "$@" 2>&1 | tail -1 | sed "s/^/$label: /"
}
for i in $(seq "$RUNS"); do
  for kind in full window; do
    run "before-$kind" "$BEFORE" "$work/$kind"
    run "after-$kind" "$AFTER" "$work/$kind"
  done
  run "after-chunked" "$AFTER" "$work/chunked"
done
for kind in full window; do
  cmp "$work/out-before-$kind/attention.csv" "$work/out-after-$kind/attention.csv" \
    && echo "$kind: attention.csv identical before and after"
done
