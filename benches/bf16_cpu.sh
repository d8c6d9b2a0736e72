#!/usr/bin/env bash
# bf16 on the CPU (issue 41), side by side in one run on this machine, each program in its own
# process (benches/side_by_side.py: wall time, peak RSS from /usr/bin/time):
#   1. SmolLM2-135M (tools/smollm2.py convert), one window of 8,192 tokens of tinyshakespeare,
#      every metric: asa-analyze f32 and bf16 beside transformers' SDPA forward in f32 and bf16;
#      asa-analyze with key_received beside the default set, f32 and bf16.
#   2. Llama-3.2-1B shape, 1 x 512, bf16: asa-analyze with no flags (the default schedule) and
#      with --stream-layers, beside transformers' SDPA forward in bf16.
#   3. Llama-3-8B shape, 1 x 1024, bf16, every metric, streamed, beside transformers' SDPA
#      forward in bf16 (tools/make_random_checkpoint.py writes both checkpoints).
#   4. SmolLM2 at 32,768 tokens, bf16, asa-analyze alone (STAGES=...4 to run it; ~4 min).
#   5. The 8B checkpoint quantized to Q8_0 GGUF (tools/make_gguf_checkpoint.py, once: ~5 min,
#      8.5 GB), 1 x 1024, bf16, every metric, asa-analyze alone (its peak RSS).
#
#   benches/bf16_cpu.sh [PYTHON]   (PYTHON: torch + transformers + numpy + tokenizers;
#                                   STAGES: which of 1 2 3 4 5, default "1 2 3")
# Writes benches/results/bf16_cpu_*.json.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-$HOME/.cache/asa-tools/bin/python}
STAGES=${STAGES:-1 2 3}
SMOL=${SMOL:-$HOME/.cache/asa-analyze/smollm2/hf}
CKPTS=${CKPTS:-$HOME/.cache/asa-bench}
TEXT=tests/fixtures/corpus/tinyshakespeare.txt
R=benches/results
cargo build --release --quiet
side() { "$PY" benches/side_by_side.py --python "$PY" --skip-eager --device cpu --num-seqs 1 "$@" > /dev/null; }
# the checkpoint read once before a stage, so that neither program pays for a page cache the
# stage before evicted (23 GiB here: the 8B's 16 GB and transformers' 15 GB do not fit both)
warm() { cat "$@" > /dev/null; }
# the default set (every metric but those asked for by name), and key_received beside them
DEFAULTS=first_token,sink_rate,entropy,weight_sum,head_total,qk_mean,sink_mass,alpha,gate,nll,heatmap,query_profile,distance_profile,max_logit,head_role
for s in $STAGES; do
  case $s in
  1)
    for dt in float32 bfloat16; do
      side --model "$SMOL" --seq-len 8192 --dtype $dt --asa-metrics all --text $TEXT \
        --json-out $R/bf16_cpu_smollm2_8k_$dt.json
      side --model "$SMOL" --seq-len 8192 --dtype $dt --asa-metrics "$DEFAULTS,key_received" \
        --text $TEXT --skip-sdpa --json-out $R/bf16_cpu_smollm2_8k_keys_$dt.json
    done ;;
  2)
    for ckpt in 1b 8b; do
      [ -f "$CKPTS/llama$ckpt/model.safetensors.index.json" ] ||
        "$PY" tools/make_random_checkpoint.py --shape $ckpt --out "$CKPTS/llama$ckpt"
    done
    warm "$CKPTS"/llama1b/*.safetensors
    side --model "$CKPTS/llama1b" --seq-len 512 --dtype bfloat16 --asa-metrics all \
      --json-out $R/bf16_cpu_1b_default.json
    side --model "$CKPTS/llama1b" --seq-len 512 --dtype bfloat16 --asa-metrics all \
      --asa-extra=--stream-layers --skip-sdpa --json-out $R/bf16_cpu_1b_streamed.json ;;
  3)
    warm "$CKPTS"/llama8b/*.safetensors
    side --model "$CKPTS/llama8b" --seq-len 1024 --dtype bfloat16 --asa-metrics all \
      --asa-extra=--stream-layers --json-out $R/bf16_cpu_8b.json ;;
  4)
    side --model "$SMOL" --seq-len 32768 --dtype bfloat16 --asa-metrics all --text $TEXT \
      --skip-sdpa --json-out $R/bf16_cpu_smollm2_32k_bfloat16.json ;;
  5)
    GGUF=$CKPTS/llama8b.q8_0.gguf
    [ -f "$GGUF" ] || "$PY" tools/make_gguf_checkpoint.py "$CKPTS/llama8b" "$GGUF" --type q8_0
    # the token ids of stage 3 (side_by_side.py's random ids of the 8B config, seed 0)
    IDS=/tmp/bench_ids_1x1024.json
    "$PY" -c "import json, random, sys; r = random.Random(0); v = json.load(open(sys.argv[1]))['vocab_size']; json.dump([[r.randrange(v) for _ in range(1024)]], open(sys.argv[2], 'w'))" \
      "$CKPTS/llama8b/config.json" $IDS
    side --model "$GGUF" --ids $IDS --seq-len 1024 --dtype bfloat16 --asa-metrics all --skip-sdpa \
      --json-out $R/bf16_cpu_8b_q8_0.json ;;
  esac
done
for f in $R/bf16_cpu_*.json; do
  "$PY" -c "import json,sys; r=json.load(open(sys.argv[1]))['results']; print(sys.argv[1], json.dumps({k: {m: v for m, v in x.items() if m in ('wall_s','inner_s','peak_rss_gib','schedule','error')} for k, x in r.items() if isinstance(x, dict) and 'wall_s' in x}))" "$f"
done
