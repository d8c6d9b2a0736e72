#!/usr/bin/env bash
# Regression tables for the redesign (issue 22): every fixture checkpoint analysed with every
# metric by the binary built at the commit before the redesign (b037276), the CSV tables kept
# under tests/fixtures/golden/batch{1,2}/<name>/. tests/it/golden.rs runs today's binary with
# the same arguments and requires the same bytes (CPU f32 results bit-identical), new metrics
# aside. These are not a reference for correctness (tools/make_fixtures.py is): only for
# "nothing moved".
#
#   tools/make_golden_tables.sh [BINARY]      (default target/release/asa-analyze)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/asa-analyze}
# the arguments tests/it/golden.rs uses: 3 windows of 64 tokens, blocks of 16 queries (four
# query blocks), one window per forward pass and two (a partial last batch)
for batch in 1 2; do
  for model in tests/fixtures/models/*/; do
    name=$(basename "$model")
    out=tests/fixtures/golden/batch$batch/$name
    rm -rf "$out"
    "$bin" analyze "$name=$model" --seq-len 64 --num-seqs 3 --batch-size $batch --block-size 16 \
      --quiet --out "$out" > /dev/null
    rm -f "$out/run.json"
  done
done
