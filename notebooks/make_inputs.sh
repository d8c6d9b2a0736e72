#!/usr/bin/env bash
# Produces the notebooks' inputs from the built binary, in one command:
#
#   notebooks/make_inputs.sh [DIR]        # DIR: $ASA_NOTEBOOK_INPUT, else target/notebook-inputs
#
#   DIR/demo/            a reduced `asa-analyze demo` run (baseline, sink, Affine-Scaled, gated and ASA + gated
#                        models trained for $ASA_DEMO_STEPS steps, default 50): the analysis
#                        tables, the training logs, grad-stats / spikes / curves tables, figures
#   DIR/fixture-logs/    grad-stats, spikes and curves over tests/fixtures/logs with other
#                        options (step windows A..B and A..=B, ddof 0, MAD scale 1.4826,
#                        NaN/inf/empty cells, duplicate steps, TSV, JSON Lines, W&B export), so
#                        the training notebook's polars cross-check covers more than the
#                        demo's defaults
#
# The binary is target/release/asa-analyze (`cargo build --release`; $ASA_ANALYZE overrides).
# Each command writes its tables with `--out .` from inside its own folder, so the log paths
# recorded in run_<table>.json resolve relative to that folder and DIR can be moved.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
out="${1:-${ASA_NOTEBOOK_INPUT:-$repo/target/notebook-inputs}}"
steps="${ASA_DEMO_STEPS:-50}"
bin="${ASA_ANALYZE:-$repo/target/release/asa-analyze}"

if [ ! -x "$bin" ]; then
    echo "make_inputs: $bin is not built; run \`cargo build --release\` first" >&2
    exit 2
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"
start=$(date +%s)

# 1. The reduced demo: trains five small models and writes every table.
"$bin" demo --out "$out/demo" --steps "$steps" --force --quiet >"$out/demo.stdout"
echo "make_inputs: demo --steps $steps -> $out/demo ($(( $(date +%s) - start )) s)"
# The notebooks find tables by name anywhere under DIR; make sure the demo wrote them all.
for t in attention weight_sum_hist heatmap query_profile distance_profile nll_position qk_series \
         grad_stats spikes spike_steps curves; do
    if [ -z "$(find "$out/demo" -name "$t.csv" -o -name "$t.parquet" | head -1)" ]; then
        echo "make_inputs: the demo wrote no $t table under $out/demo" >&2
        exit 1
    fi
done

# 2. Log-statistics tables over the fixture logs, with non-default options.
fx="$out/fixture-logs"
rm -rf "$fx"
mkdir -p "$fx/logs"
for f in hand.csv noisy.csv long.csv run.tsv nested.jsonl wandb_export.csv; do
    cp "$repo/tests/fixtures/logs/$f" "$fx/logs/"
done
case_() { # case_ NAME COMMAND ARGS...: runs one command into fixture-logs/NAME/
    local name=$1
    shift
    mkdir -p "$fx/$name"
    (cd "$fx/$name" && "$bin" "$@" --out . --quiet)
}
L=../logs
case_ table4_half_open  grad-stats $L/hand.csv $L/noisy.csv $L/long.csv mytsv=$L/run.tsv --steps 0..500
case_ table4_inclusive  grad-stats $L/long.csv $L/nested.jsonl $L/wandb_export.csv --steps 100..=900 --ddof 0
case_ table5_all_steps  spikes $L/hand.csv $L/noisy.csv $L/long.csv mytsv=$L/run.tsv --k 1,2,6
case_ table5_scaled     spikes $L/long.csv $L/nested.jsonl exp=$L/wandb_export.csv --steps 200.. --k 3,4.5 --mad-scale 1.4826
case_ curves_late       curves $L/long.csv --ema 0.9 --steps 1000..=1100
case_ curves_jsonl      curves $L/nested.jsonl --metric eval/loss,grad_norm --ema 0.6

echo "make_inputs: fixture log tables -> $fx"
echo "make_inputs: done in $(( $(date +%s) - start )) s; run the notebooks with"
echo "  ASA_NOTEBOOK_INPUT=$out python notebooks/run_notebooks.py"
