#!/usr/bin/env bash
# Regression tables for the redesign (issue 22): every fixture checkpoint analysed with every
# metric by the binary built at the commit before the redesign (b037276), the CSV tables kept
# under tests/fixtures/golden/<name>/. tests/it/golden.rs runs today's binary with the same
# arguments and requires the same bytes (CPU f32 results bit-identical), new metrics aside.
# These are not a reference for correctness (tools/make_fixtures.py is): only for "nothing moved".
#
#   tools/make_golden_tables.sh [BINARY]      (default target/release/asa-analyze)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/asa-analyze}
# the arguments tests/it/golden.rs uses: 3 windows of 64 tokens, batches of 2, blocks of 16
# queries (four query blocks and a partial batch)
args=(--seq-len 64 --num-seqs 3 --batch-size 2 --block-size 16 --quiet)
for model in tests/fixtures/models/*/; do
  name=$(basename "$model")
  out=tests/fixtures/golden/$name
  rm -rf "$out"
  "$bin" analyze "$name=$model" "${args[@]}" --out "$out" > /dev/null
  rm -f "$out/run.json"
done
