#!/usr/bin/env bash
# Builds the CUDA binary and the test binaries of the crates with CUDA code (asa-engine,
# asa-metrics) on a machine without a GPU (the
# ../shared/cuda toolchain, sm_90 unless CUDA_COMPUTE_CAP says otherwise) and packs them,
# stripped and xz-compressed, into target-gpu/ with the commit they were built at: what
# benches/gpu_session.sh unpacks on the GPU machine (carry target-gpu with the device tool).
#
#   bash benches/pack_gpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(../shared/cuda/toolchain.sh)"
export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90}
cargo build --release --features cuda --target-dir target-cuda
# one line per crate: its test binary and the name it is packed under (lib-tests-CRATE)
tests=$(cargo test --release --target-dir target-cuda -p asa-engine -p asa-metrics \
    --features asa-engine/cuda,asa-metrics/cuda --lib --no-run --message-format=json 2>/dev/null |
    python3 -c "import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get('reason') == 'compiler-artifact' and m.get('executable') and m['target']['kind'] == ['lib']:
        print(m['executable'] + ':lib-tests-' + m['target']['name'])")
test "$(echo "$tests" | wc -l)" -eq 2
mkdir -p target-gpu
rm -f target-gpu/lib-tests*.xz
for pair in "target-cuda/release/asa-analyze:asa-analyze" $tests; do
    strip -o /tmp/pack_gpu_binary "${pair%%:*}"
    xz -T2 -6 -c /tmp/pack_gpu_binary > "target-gpu/${pair##*:}.xz"
done
rm -f /tmp/pack_gpu_binary
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+changes')" > target-gpu/COMMIT
ls -la target-gpu
echo "built at $(cat target-gpu/COMMIT)"
