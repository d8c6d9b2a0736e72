#!/usr/bin/env bash
# A coverage-guided campaign (issue 65 item 6): each target of fuzz/ (libFuzzer through
# cargo-fuzz) run until RUNS executions or SECONDS_EACH seconds, whichever comes first, from its
# committed corpus (fuzz/corpus/TARGET.tar.xz, unpacked into fuzz/corpus-work/, not
# committed); at the end the corpus is minimized (-merge=1: the fewest inputs with the same
# coverage, the committed ones and the new) and packed again (not in CI: CI=true). A crash, a timeout or running out of memory stops that target with its
# input under fuzz/artifacts/TARGET/; the counts of every target are printed as a table
# (docs/reliability.md's). Stable Rust: RUSTC_BOOTSTRAP=1 lets cargo-fuzz pass libFuzzer's
# flags; no sanitizer (safe Rust: the oracle is a panic, an abort, a hang or the memory cap).
#
#   tools/fuzz_campaign.sh [TARGET ...]     # RUNS=1000000 SECONDS_EACH=1200 by default
#   SECONDS_EACH=20 tools/fuzz_campaign.sh  # CI's short run
set -uo pipefail
cd "$(dirname "$0")/../fuzz"
runs=${RUNS:-1000000}
seconds=${SECONDS_EACH:-1200}
command -v cargo-fuzz > /dev/null || cargo install -q --locked cargo-fuzz@0.13.2 || exit 1
export RUSTC_BOOTSTRAP=1
cargo fuzz build -s none || exit 1
# the binaries built once (a source edited during the campaign does not rebuild them)
bin=target/x86_64-unknown-linux-gnu/release
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(cargo fuzz list)
failed=0
printf '%-14s %12s %8s %10s %s\n' target executions seconds exec/s result
for t in "${targets[@]}"; do
    work=corpus-work/$t
    rm -rf "$work"
    mkdir -p "$work" "artifacts/$t"
    [ ! -f "corpus/$t.tar.xz" ] || tar -xJf "corpus/$t.tar.xz" -C corpus-work
    log=$(mktemp)
    start=$(date +%s)
    "$bin/$t" "$work" -runs="$runs" -max_total_time="$seconds" \
        -rss_limit_mb=4096 -timeout=30 -print_final_stats=1 -artifact_prefix="artifacts/$t/" > "$log" 2>&1
    rc=$?
    took=$(( $(date +%s) - start ))
    execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$log" | tail -1)
    rate=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+)/\1/p' "$log" | tail -1)
    result=ok
    if [ $rc -ne 0 ]; then
        result="FAILED (exit $rc): $(grep -m1 -E 'ERROR: libFuzzer|panicked at|deadly signal|out-of-memory|timeout' "$log")"
        failed=1
        cp "$log" "artifacts/$t/last.log"
    fi
    # the corpus minimized and packed again, crashes' inputs kept
    if [ "${CI:-}" != true ]; then
        min=$(mktemp -d)
        mkdir "$min/$t"
        "$bin/$t" "$min/$t" "$work" -merge=1 -rss_limit_mb=4096 -timeout=30 > /dev/null 2>&1 || true
        cp artifacts/$t/crash-* artifacts/$t/oom-* artifacts/$t/timeout-* "$min/$t/" 2> /dev/null || true
        tar -cJf "corpus/$t.tar.xz" -C "$min" "$t"
        rm -rf "$min"
    fi
    printf '%-14s %12s %8s %10s %s\n' "$t" "${execs:-?}" "$took" "${rate:-?}" "$result"
    rm -f "$log"
done
exit $failed
