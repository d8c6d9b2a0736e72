#!/usr/bin/env bash
# Two builds of the binary side by side on the same machine (issue 55: the workspace must
# change no number and cost no time): SmolLM2-135M, one window of 8,192 tokens of
# tinyshakespeare, every default metric, f32, runs alternated before / after; then `demo`
# once each. Every table of the two 8k runs and the two demo folders must be the same bytes.
#
#   benches/before_after.sh BEFORE_BINARY AFTER_BINARY [RUNS]
# SMOL names the checkpoint (default: the one tools/smollm2.py converts). Prints wall and
# user seconds and peak RSS (/usr/bin/time) per run, then the comparison of the outputs.
set -euo pipefail
cd "$(dirname "$0")/.."
before=$(realpath "$1") after=$(realpath "$2") runs=${3:-2}
text=$PWD/tests/fixtures/corpus/tinyshakespeare.txt
SMOL=${SMOL:-$HOME/.cache/asa-analyze/smollm2/hf}
work=$(mktemp -d /tmp/asa-before-after.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir "$work/before" "$work/after"
timed() { # name which args...: runs in $work/which, so outputs quote the same relative names
    local name=$1 which=$2; shift 2
    (cd "$work/$which" && /usr/bin/time -f "$name: wall %e s, user %U s, peak RSS %M KiB" \
        "${!which}" "$@" > /dev/null)
}
for run in $(seq "$runs"); do
    for which in before after; do
        rm -rf "$work/$which/8k"
        timed "8k $which run $run" "$which" analyze "smollm2=$SMOL" \
            --corpus "$text" --seq-len 8192 --num-seqs 1 --device cpu --quiet --out 8k
    done
done
for which in before after; do
    timed "demo $which" "$which" demo --out demo
done
same=0 differ=0
for dir in 8k demo; do
    while IFS= read -r -d '' file; do
        rel=${file#"$work/before/$dir/"}
        # run.json names each run's times; report.html embeds the run.json
        case $rel in *.json | report.html | */report.html) continue ;; esac
        if cmp -s "$file" "$work/after/$dir/$rel"; then
            same=$((same + 1))
        else
            differ=$((differ + 1))
            echo "differs: $dir/$rel"
        fi
    done < <(find "$work/before/$dir" -type f -print0)
done
echo "outputs: $same files the same bytes, $differ differ (run.json and report.html skipped: they hold the run's times)"
