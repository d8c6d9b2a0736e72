#!/usr/bin/env bash
# Long-sequence benchmark (issue: long sequences in bounded memory): SmolLM2-135M, one
# sequence of 2k, 8k and 32k tokens of tinyshakespeare, f32, on this machine. Each length
# runs asa-analyze (every metric), transformers eager + output_attentions + metrics, and the
# transformers SDPA forward (the floor) side by side; every process is capped at 20 GiB of
# address space so a run that cannot fit fails with a recorded allocation error.
#
#   benches/long_sequences.sh [PYTHON]     (PYTHON: an environment with torch + transformers)
#
# Writes benches/results/long_smollm2_{2k,8k,32k}.json and benches/results/long_sequences.png.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-$HOME/.cache/asa-tools/bin/python}
MODEL=${MODEL:-$HOME/.cache/asa-analyze/smollm2/hf}
TEXT=${TEXT:-tests/fixtures/corpus/tinyshakespeare.txt}
cargo build --release --quiet
for t in 2048 8192 32768; do
  name=$((t / 1024))k
  "$PY" benches/side_by_side.py --model "$MODEL" --seq-len "$t" --num-seqs 1 --device cpu \
    --dtype float32 --asa-metrics all --text "$TEXT" --mem-limit 20 --python "$PY" \
    --json-out "benches/results/long_smollm2_${name}.json" > /dev/null
  echo "$name done"
done
"$PY" benches/plot_long_sequences.py benches/results/long_smollm2_{2k,8k,32k}.json \
  --out benches/results/long_sequences.png
