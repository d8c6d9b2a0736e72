#!/usr/bin/env bash
# Sliding-window benchmark (issue 25): SmolLM2-135M at 32k tokens, every metric, f32, CPU,
# twice on the same weights: as it is (full causal attention, model_type llama) and as a
# Mistral config with a 4096-key sliding window on every layer. asa-analyze skips the key
# tiles outside each query block's window; beside each, the transformers SDPA forward of the
# same config (its own sliding mask), every process capped at 20 GiB of address space.
#
#   benches/sliding_window.sh [PYTHON]     (PYTHON: an environment with torch + transformers)
#
# Writes benches/results/sliding_window_{full,4096}_32k.json.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-/tmp/asa-tools-venv/bin/python}
MODEL=${MODEL:-$HOME/.cache/asa-analyze/smollm2/hf}
TEXT=${TEXT:-tests/fixtures/corpus/tinyshakespeare.txt}
T=${T:-32768}
WINDOW=${WINDOW:-4096}
cargo build --release --quiet
work=target/bench-sliding
rm -rf "$work" && mkdir -p "$work/full" "$work/window"
for d in full window; do
  ln -s "$(realpath "$MODEL/model.safetensors")" "$work/$d/model.safetensors"
  ln -s "$(realpath "$MODEL/tokenizer.json")" "$work/$d/tokenizer.json"
done
cp "$MODEL/config.json" "$work/full/config.json"
"$PY" - "$MODEL/config.json" "$work/window/config.json" "$WINDOW" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(model_type="mistral", architectures=["MistralForCausalLM"], sliding_window=int(sys.argv[3]))
json.dump(c, open(sys.argv[2], "w"), indent=1)
PYEOF
for d in window full; do
  name=$([ "$d" = full ] && echo full || echo "$WINDOW")
  "$PY" benches/side_by_side.py --model "$work/$d" --seq-len "$T" --num-seqs 1 --device cpu \
    --dtype float32 --asa-metrics all --text "$TEXT" --mem-limit 20 --python "$PY" --skip-eager \
    --json-out "benches/results/sliding_window_${name}_$((T / 1024))k.json" > /dev/null
  echo "$d done"
done
