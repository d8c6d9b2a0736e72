#!/usr/bin/env bash
# Benchmark (not a test): a 1,000,000-step training log through `asa-analyze spikes`.
#
#     cargo build --release && bash benches/log_spikes.sh
#
# Writes a CSV log (step, loss, grad_norm, lr; about 60 MB) with awk (fixed seed, no
# Python needed), then runs `spikes --k 6,9 --out DIR` three times under
# /usr/bin/time -v and prints wall time and peak RSS of each run. When the tools venv
# exists (~/.cache/asa-tools), the same numbers are also computed the usual Python way
# (csv module + numpy median) for comparison. Results go into BENCHMARKS.md by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=target/release/asa-analyze
[ -x "$bin" ] || { echo "build first: cargo build --release" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log="$work/big.csv"

awk 'BEGIN {
  srand(20261123);
  print "step,loss,grad_norm,lr";
  for (s = 0; s < 1000000; s++) {
    g = (1 + 4 * exp(-s / 1000)) * exp(0.1 * (rand() + rand() + rand() - 1.5) * 2);
    if (rand() < 0.0005) g *= 3;
    printf "%d,%.6f,%.6f,%.3e\n", s, 2.5 + 8 * exp(-s / 40000) + 0.05 * (rand() - 0.5), g, 3e-4;
  }
}' > "$log"
echo "log: $(wc -l < "$log") lines, $(du -h "$log" | cut -f1)"

for i in 1 2 3; do
  /usr/bin/time -v "$bin" spikes "$log" --k 6,9 --out "$work/out$i" --quiet 2> "$work/time$i"
  wall=$(grep "Elapsed (wall clock)" "$work/time$i" | awk '{print $NF}')
  rss=$(grep "Maximum resident set size" "$work/time$i" | awk '{print $NF}')
  echo "asa-analyze spikes run $i: wall ${wall}, peak RSS $((rss / 1024)) MiB"
done
"$bin" spikes "$log" --k 6,9

py=~/.cache/asa-tools/bin/python
if [ -x "$py" ]; then
  cat > "$work/spikes.py" <<'EOF'
import csv, sys
import numpy as np
steps, g = [], []
with open(sys.argv[1]) as f:
    for row in csv.DictReader(f):
        steps.append(int(row["step"])); g.append(float(row["grad_norm"]))
g = np.array(g); med = np.median(g); mad = np.median(np.abs(g - med))
for k in (6, 9):
    print(k, med, mad, int((g > med + k * mad).sum()))
EOF
  /usr/bin/time -v "$py" "$work/spikes.py" "$log" 2> "$work/timepy"
  wall=$(grep "Elapsed (wall clock)" "$work/timepy" | awk '{print $NF}')
  rss=$(grep "Maximum resident set size" "$work/timepy" | awk '{print $NF}')
  echo "python csv + numpy: wall ${wall}, peak RSS $((rss / 1024)) MiB"
fi
