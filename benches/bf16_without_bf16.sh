#!/usr/bin/env bash
# bf16 on a CPU without AVX-512 BF16 (issue 54), side by side in one run on this machine:
# SmolLM2-135M (tools/smollm2.py convert), one window of 8,192 tokens of tinyshakespeare,
# every metric (`--asa-metrics all`), asa-analyze in f32 and bf16 with its kernels capped
# at AVX2 (`ASA_SIMD=avx2`: the binary runs as an AVX2-only CPU runs it) and uncapped,
# beside transformers' SDPA forward in f32 and bf16 (torch chooses its own instructions).
# Each program in its own process (benches/side_by_side.py: wall time, peak RSS).
#
#   benches/bf16_without_bf16.sh [PYTHON]   (torch + transformers + numpy + tokenizers)
# Writes benches/results/bf16_nobf16_*.json.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-$HOME/.cache/asa-tools/bin/python}
SMOL=${SMOL:-$HOME/.cache/asa-analyze/smollm2/hf}
TEXT=tests/fixtures/corpus/tinyshakespeare.txt
R=benches/results
cargo build --release --quiet
side() { "$PY" benches/side_by_side.py --python "$PY" --skip-eager --device cpu --num-seqs 1 \
  --model "$SMOL" --seq-len 8192 --asa-metrics all --text $TEXT "$@" > /dev/null; }
for dt in float32 bfloat16; do
  ASA_SIMD=avx2 side --dtype $dt --json-out $R/bf16_nobf16_avx2_$dt.json
  side --dtype $dt --skip-sdpa --json-out $R/bf16_nobf16_avx512_$dt.json
done
"$PY" - <<'PY'
import json
for simd in ("avx2", "avx512"):
    for dt in ("float32", "bfloat16"):
        r = json.load(open(f"benches/results/bf16_nobf16_{simd}_{dt}.json"))
        print(simd, dt, json.dumps(r)[:400])
PY
