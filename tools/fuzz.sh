#!/usr/bin/env bash
# The long fuzz run (issue 24): tests/it/fuzz/ with fresh seeds for about an hour (or
# FUZZ_MINUTES), ASA_FUZZ_CASES cases a round (default 2000). Each new failing case's
# "target seed" is appended to tests/fixtures/fuzz/cases.txt, which every `cargo test` (and
# every later round) replays: commit it with the fix. The rounds' counts are summed at the
# end; each failure's message is in the log. Each round also runs the Python entry points'
# harness (python/tests/fuzz_entry_points.py) with the round's seed; its defects are printed
# with the case that shows them (replay: python fuzz_entry_points.py tests/fixtures SEED N).
#
#   tools/fuzz.sh            # FUZZ_MINUTES=60 by default
set -uo pipefail
cd "$(dirname "$0")/.."
minutes=${FUZZ_MINUTES:-60}
end=$(( $(date +%s) + minutes * 60 ))
cargo test --release --no-run --quiet || exit 1
round=0
total=0; ran=0; refused=0; defects=0
# the Python entry points (python/tests/fuzz_entry_points.py), PY_CASES a round, in the
# package's venv (PYTHON, default /tmp/asa-py-venv/bin/python), when it is there
PY=${PYTHON:-/tmp/asa-py-venv/bin/python}
py_total=0; py_returned=0; py_refused=0; py_defects=0
while [ "$(date +%s)" -lt "$end" ]; do
  seed=$(( $(date +%s) + round ))
  report=$(mktemp)
  ASA_FUZZ_SEED=$seed ASA_FUZZ_CASES=${ASA_FUZZ_CASES:-2000} ASA_FUZZ_REPORT=$report \
    cargo test --release --quiet fuzz:: -- --nocapture > "$report.log" 2>&1
  grep -E "^fuzz:|^[A-Z][a-zA-Z]+ [0-9]+: " "$report.log" | head -20
  # counts of the generated cases (corpus cases are replays)
  read -r c r x d < <(sed -nE 's/^fuzz: ([0-9]+) cases \(([0-9]+) from.*\), ([0-9]+) ran .*, ([0-9]+) refused .*/\1 \2 \3 \4/p' "$report.log")
  total=$((total + ${c:-0} - ${r:-0})); ran=$((ran + ${x:-0})); refused=$((refused + ${d:-0}))
  new=$(grep -c . "$report" || true)
  defects=$((defects + new))
  if [ -s "$report" ]; then
    cat "$report" >> tests/fixtures/fuzz/cases.txt
    echo >> tests/fixtures/fuzz/cases.txt
    echo "round $round (seed $seed): failing cases added to tests/fixtures/fuzz/cases.txt"
  fi
  rm -f "$report" "$report.log"
  if [ -x "$PY" ]; then
    "$PY" python/tests/fuzz_entry_points.py tests/fixtures "$seed" "${PY_CASES:-100}" > "$report.py" 2>&1
    status=$?
    grep -E "^DEFECT" "$report.py" | head -20
    read -r n r x d < <(sed -nE 's/^fuzz-python: ([0-9]+) cases, ([0-9]+) returned, ([0-9]+) refused, ([0-9]+) defects/\1 \2 \3 \4/p' "$report.py")
    if [ -z "${n:-}" ]; then  # the interpreter died: the last case it began is the defect
      echo "python round (seed $seed) ended with status $status in: $(grep '^case ' "$report.py" | tail -1)"
      n=0; r=0; x=0; d=1
    fi
    py_total=$((py_total + n)); py_returned=$((py_returned + r)); py_refused=$((py_refused + x)); py_defects=$((py_defects + d))
    rm -f "$report.py"
  fi
  round=$((round + 1))
done
echo "fuzz.sh: $round rounds, $total generated cases, $defects new defects (runs: $ran exit 0, $refused exit 2, corpus replays included)"
echo "fuzz.sh: the Python entry points: $py_total cases, $py_returned returned, $py_refused refused, $py_defects defects"

