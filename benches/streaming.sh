#!/usr/bin/env bash
# Layer-streaming benchmark (issue 23): random-weight Llama checkpoints of public shapes
# (tools/make_random_checkpoint.py: bf16 safetensors shards, as transformers saves them),
# asa-analyze with every metric beside transformers bf16 on the same token ids, CPU, each in
# its own process (benches/side_by_side.py: wall time, peak RSS).
#   1B shape (Llama-3.2-1B, 2.5 GB), 1 x 512: asa-analyze streamed (--stream-layers), f32
#      analysis; transformers eager + output_attentions + metrics, and SDPA, in bf16.
#   8B shape (Llama-3-8B, 16 GB), 1 x 1024: asa-analyze (streamed: its f32 weights would
#      pass the memory budget), transformers SDPA bf16 (the model in memory: 16 GB).
#
#   benches/streaming.sh [PYTHON]   (PYTHON: torch + transformers + numpy; CKPTS: where the
#                                    checkpoints go, 19 GB, default ~/.cache/asa-bench)
# Writes benches/results/streaming_{1b,8b}.json.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-$HOME/.cache/asa-tools/bin/python}
CKPTS=${CKPTS:-$HOME/.cache/asa-bench}
cargo build --release --quiet
for shape in 1b 8b; do
  [ -f "$CKPTS/llama$shape/model.safetensors.index.json" ] ||
    "$PY" tools/make_random_checkpoint.py --shape $shape --out "$CKPTS/llama$shape"
done
"$PY" benches/side_by_side.py --model "$CKPTS/llama1b" --seq-len 512 --num-seqs 1 --device cpu \
  --dtype bfloat16 --asa-dtype float32 --asa-metrics all --asa-extra=--stream-layers \
  --python "$PY" --json-out benches/results/streaming_1b.json > /dev/null
"$PY" benches/side_by_side.py --model "$CKPTS/llama8b" --seq-len 1024 --num-seqs 1 --device cpu \
  --dtype bfloat16 --asa-dtype float32 --asa-metrics all --skip-eager \
  --python "$PY" --json-out benches/results/streaming_8b.json > /dev/null
for s in 1b 8b; do
  "$PY" -c "import json,sys; r=json.load(open(sys.argv[1]))['results']; print(sys.argv[2], json.dumps({k: {m: v for m, v in x.items() if m in ('wall_s','inner_s','peak_rss_gib','schedule','error')} for k, x in r.items() if isinstance(x, dict) and 'wall_s' in x}))" \
    benches/results/streaming_$s.json $s
done
