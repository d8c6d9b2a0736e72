#!/bin/bash
# Incremental release rebuilds after touching one file (BENCHMARKS.md, issue 66): run in an
# up-to-date tree with nothing else running; prints the seconds of `cargo build --release`
# and of `cargo test --release --no-run` after each touch.
# usage: time_rebuilds.sh TREE FAMILY_FILE METRIC_FILE
cd "$1"
cargo build --release -q 2>/dev/null; cargo test --release --no-run -q 2>/dev/null
for f in "$2" "$3"; do
  touch "$f"; b=$( { /usr/bin/time -f %e cargo build --release -q 2>&1 >/dev/null; } 2>&1 | tail -1)
  touch "$f"; t=$( { /usr/bin/time -f %e cargo test --release --no-run -q 2>&1 >/dev/null; } 2>&1 | tail -1)
  echo "$f build $b test $t"
done
