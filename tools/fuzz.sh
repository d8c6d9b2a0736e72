#!/usr/bin/env bash
# The long fuzz run (issue 24): tests/it/fuzz.rs with fresh seeds for about an hour (or
# FUZZ_MINUTES), ASA_FUZZ_CASES cases a round (default 2000). Each failing case's "target
# seed" is appended to tests/fixtures/fuzz/cases.txt, which every `cargo test` replays:
# commit it with the fix.
#
#   tools/fuzz.sh            # FUZZ_MINUTES=60 by default
set -uo pipefail
cd "$(dirname "$0")/.."
minutes=${FUZZ_MINUTES:-60}
end=$(( $(date +%s) + minutes * 60 ))
cargo test --release --no-run --quiet || exit 1
round=0
while [ "$(date +%s)" -lt "$end" ]; do
  seed=$(( $(date +%s) + round ))
  report=$(mktemp)
  ASA_FUZZ_SEED=$seed ASA_FUZZ_CASES=${ASA_FUZZ_CASES:-2000} ASA_FUZZ_REPORT=$report \
    cargo test --release --quiet fuzz:: -- --nocapture 2>&1 | grep -E "^fuzz:|defects|FAILED" | head -5
  if [ -s "$report" ]; then
    cat "$report" >> tests/fixtures/fuzz/cases.txt
    echo >> tests/fixtures/fuzz/cases.txt
    echo "round $round (seed $seed): failing cases added to tests/fixtures/fuzz/cases.txt"
  fi
  rm -f "$report"
  round=$((round + 1))
done
