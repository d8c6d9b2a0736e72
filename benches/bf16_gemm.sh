#!/usr/bin/env bash
# The bf16 GEMM beside torch's (oneDNN) on the same shapes, in one run (issue 41):
# benches/bf16_gemm.rs (peaks, the bf16 GEMM, the f32 gemm crate) then
# benches/bf16_gemm_torch.py; both JSON objects go to benches/results/bf16_gemm.json.
#   PYTHON=/path/to/venv/bin/python benches/bf16_gemm.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
ours=$(cargo bench --quiet --bench bf16_gemm 2>/dev/null)
torch=$("$python" benches/bf16_gemm_torch.py)
mkdir -p benches/results
printf '{"date": "%s", "cpu": "%s",\n "asa_analyze": %s,\n "torch": %s}\n' \
    "$(date -u +%F)" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "$ours" "$torch" \
    | tee benches/results/bf16_gemm.json
