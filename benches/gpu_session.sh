#!/usr/bin/env bash
# Everything issue 8 measures on a GPU machine, in one go (the device tool's machine: torch,
# transformers and nvidia-smi there, no Rust). Expects the CUDA binary xz-compressed at
# target-gpu/asa-analyze.xz and, for `unit`, the test binaries of the crates with CUDA code
# at target-gpu/lib-tests-*.xz (both built elsewhere by benches/pack_gpu.sh); writes reports to
# ${OUT:-/tmp/gpu_out}.
#
#   bash benches/gpu_session.sh [unit] [verify] [bench] [long] [probe] [kernels] [capture]
#
# unit:   the cuda feature's unit tests (CUDA kernels against the CPU row pass).
# verify: benches/gpu_verify.py on every fixture (CPU f32 vs CUDA f32 / bf16).
# bench:  benches/side_by_side.py, Llama-3.2-1B shape, 10 x 1024 bf16, batch 10 and 1 (the
#         Python runs after one untimed pass, asa-analyze cold).
# long:   SmolLM2-135M shape (random weights), 1 x 32,768 tokens, bf16, every metric, beside
#         the transformers SDPA forward.
# probe:  asa-analyze alone on the same case with other settings (what the time goes to).
# kernels: GPU time per kernel (Nsight Compute, clocks as in a plain run) of asa-analyze on
#         NSEQ x 1024 tokens (NSEQ=2 unless set), one batch.
# capture: `asa.capture` on the GPU (the Python package, polars and transformers unpacked from
#         target-gpu-python/site.tar.xz, packed by benches/pack_python.sh; needs no
#         target-gpu): the torch path's tests on cuda against their float64 references and
#         the CPU tiles (python/tests/test_capture.py with ASA_TEST_DEVICE=cuda), then a
#         Llama-3.2-1B-shaped transformers model at 4,096 tokens, bf16, every default metric,
#         beside the same forward with SDPA and with FlashAttention 2 (where installed), and
#         the SmolLM2 shape at 32,768 tokens beside SDPA (benches/capture.py).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
ASA=/tmp/asa-analyze
unpack() {
    python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" "$1" "$2"
    chmod +x "$2"
}
[ ! -f target-gpu/asa-analyze.xz ] || unpack target-gpu/asa-analyze.xz "$ASA"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
echo "binaries built at commit $(cat target-gpu/COMMIT 2>/dev/null || echo unknown)" | tee -a "$OUT/gpu.txt"
echo "python package built at $(cat target-gpu-python/COMMIT 2>/dev/null || echo unknown)" | tee -a "$OUT/gpu.txt"
# every step but kernels by default (capture where its pack was carried)
steps=${*:-unit verify bench long probe $([ ! -f target-gpu-python/site.tar.xz ] || echo capture)}
CORE=first_token,weight_sum,entropy,head_total,nll
summary() {
    python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['results']; print(json.dumps({k: {m: v for m, v in x.items() if m in ('wall_s','inner_s','seconds','peak_gpu_gib','error')} for k, x in r.items() if isinstance(x, dict) and 'wall_s' in x}))" "$1" | tee -a "$OUT/bench.txt"
}
needs_model() {
    [ -d /tmp/b1 ] || python3 benches/transformers_way.py --make-random /tmp/b1 --shape 1b --dtype bfloat16
}
for step in $steps; do
    case $step in
    unit)
        for packed in target-gpu/lib-tests-*.xz; do
            name=$(basename "$packed" .xz)
            unpack "$packed" "/tmp/$name"
            "/tmp/$name" cuda_ 2>&1 | tee -a "$OUT/unit.txt" || echo "UNIT TESTS FAILED: $name"
        done
        ;;
    verify)
        python3 benches/gpu_verify.py --asa "$ASA" --out /tmp/gpu_verify | tee "$OUT/gpu_verify.json"
        ;;
    bench)
        needs_model
        # BENCH_RUNS: batch:metrics cases (default all three); EAGER=0 skips transformers' eager run
        for run in ${BENCH_RUNS:-10:core 1:core 10:all}; do
            bs=${run%%:*} metrics=${run##*:}
            # transformers' eager run (its metrics beside ours) once, on the first case
            skip=$([ "$run" = "10:core" ] && [ "${EAGER:-1}" = 1 ] || echo --skip-eager)
            python3 benches/side_by_side.py $skip --model /tmp/b1 --seq-len 1024 --num-seqs 10 --device cuda \
                --dtype bfloat16 --asa "$ASA" --batch-size $bs --warmup 1 --asa-metrics ${metrics/core/$CORE} \
                --json-out "$OUT/gpu_1b_bs${bs}_$metrics.json" >/dev/null
            echo "batch $bs, metrics $metrics:"
            summary "$OUT/gpu_1b_bs${bs}_$metrics.json"
        done
        ;;
    long)
        [ -d /tmp/smol ] || python3 benches/transformers_way.py --make-random /tmp/smol --shape smollm2 --dtype bfloat16
        python3 benches/side_by_side.py --model /tmp/smol --seq-len 32768 --num-seqs 1 --device cuda \
            --dtype bfloat16 --asa "$ASA" --batch-size 1 --warmup 1 --skip-eager --asa-metrics all \
            --json-out "$OUT/gpu_smollm2_32k.json" >/dev/null
        echo "SmolLM2 shape, 1 x 32768, every metric:"
        summary "$OUT/gpu_smollm2_32k.json"
        ;;
    probe)
        # steady state: the time of 20 sequences minus that of 10 is 10 sequences' worth
        # without the once-per-process costs (CUDA context, kernel loading)
        needs_model
        ids=/tmp/bench_ids_20x1024.json
        [ -f $ids ] || python3 -c "import json,random; r=random.Random(0); json.dump([[r.randrange(128256) for _ in range(1024)] for _ in range(20)], open('$ids','w'))"
        core=first_token,weight_sum,entropy,head_total,nll
        for extra in "--metrics $core" "--metrics nll" "--metrics $core --block-size 256" "--metrics $core --entropy-of softmax" ""; do
            for seqs in 10 20; do
                secs=$("$ASA" analyze /tmp/b1 --corpus $ids --seq-len 1024 --num-seqs $seqs --bos never --device cuda \
                    --dtype bf16 --batch-size 10 --out /tmp/probe_out --quiet $extra >/dev/null &&
                    python3 -c "import json; m=json.load(open('/tmp/probe_out/run.json'))['models'][0]; print(m['seconds'], 'block', m['block_size'])")
                echo "probe [$extra] $seqs x 1024: $secs s" | tee -a "$OUT/probe.txt"
            done
        done
        # where a batch's time goes, phase by phase (each phase waits for the GPU at its end)
        "$ASA" analyze /tmp/b1 --corpus $ids --seq-len 1024 --num-seqs 20 --bos never --device cuda --dtype bf16 \
            --batch-size 10 --out /tmp/probe_out --quiet --profile \
            --metrics first_token,weight_sum,entropy,head_total,nll 2>&1 >/dev/null | tee -a "$OUT/probe.txt"
        python3 benches/transformers_way.py --model /tmp/b1 --ids $ids --device cuda --dtype bfloat16 --batch-size 10 \
            --mode sdpa --warmup 1 | tee -a "$OUT/probe.txt"
        ;;
    capture)
        mkdir -p /tmp/site
        python3 -c "import lzma, sys, tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])" \
            target-gpu-python/site.tar.xz /tmp/site
        export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
        ASA_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider python/tests/test_capture.py -k torch 2>&1 |
            tee "$OUT/capture_tests.txt" | tail -15 || echo "CAPTURE TESTS FAILED"
        python3 benches/capture.py --device cuda --shape 1b --tokens 4096 --dtype bfloat16 \
            --configs sdpa flash capture | tee "$OUT/capture_bench.txt"
        # the 32k case stops after CAPTURE_LONG_S seconds (240 unless set), leaving the rest its time
        timeout "${CAPTURE_LONG_S:-240}" python3 benches/capture.py --device cuda --shape smollm2 --tokens 32768 \
            --dtype bfloat16 --configs sdpa capture | tee -a "$OUT/capture_bench.txt" ||
            echo "SmolLM2 shape at 32k: stopped after ${CAPTURE_LONG_S:-240} s" | tee -a "$OUT/capture_bench.txt"
        ;;
    kernels)
        needs_model
        nseq=${NSEQ:-2}
        ids=/tmp/bench_ids_${nseq}x1024.json
        python3 -c "import json,random; r=random.Random(0); json.dump([[r.randrange(128256) for _ in range(1024)] for _ in range($nseq)], open('$ids','w'))"
        ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base --log-file /tmp/ncu.csv \
            "$ASA" analyze /tmp/b1 --corpus $ids --seq-len 1024 --num-seqs $nseq --bos never --device cuda \
            --dtype bf16 --batch-size $nseq --out /tmp/ncu_out --quiet --metrics first_token,weight_sum,entropy,head_total,nll >/dev/null
        python3 - /tmp/ncu.csv <<'PY' | tee "$OUT/kernels.txt"
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head, body = rows[0], rows[1:]
name, value = head.index("Kernel Name"), head.index("Metric Value")
total, count = collections.Counter(), collections.Counter()
for r in body:
    k = r[name].split("(")[0][:70]
    total[k] += float(r[value].replace(",", "")) * 1e-6
    count[k] += 1
print(f"all kernels: {sum(total.values()):.1f} ms in {sum(count.values())} launches")
for k, ms in total.most_common(25):
    print(f"{ms:9.2f} ms {count[k]:6d}x  {k}")
PY
        ;;
    esac
done
