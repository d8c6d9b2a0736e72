#!/usr/bin/env bash
# Builds the Python package's wheel on a machine without a GPU and packs it, with the polars
# it needs and the transformers its tests' fixtures were made with (the GPU machine's image
# has torch, an older transformers, numpy and pytest, no polars, and no internet), into
# target-gpu-python/site.tar.xz: what `benches/gpu_session.sh capture` unpacks there as a
# site folder. The shared objects are stripped and the whole xz-compressed: 46 MB with
# polars 2.1 and transformers 5.24. With target-gpu's 28 MB that is more than one device
# call carries (64 MiB): one call carries target-gpu-python and runs the capture step,
# another target-gpu and the rest.
#
#   PYTHON=/path/to/venv/bin/python bash benches/pack_python.sh
#
# PYTHON: an interpreter with pip, polars and transformers (the versions packed are its own).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
polars=$("$PY" -c "import polars; print(polars.__version__)")
transformers=$("$PY" -c "import transformers; print(transformers.__version__)")
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
rm -rf target/wheels
"$PY" -m pip wheel -q --no-deps . -w target/wheels
# the GPU machine's python is 3.12: the wheels fetched are those it installs (the package's
# own is abi3, for any python from 3.9)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$stage/wheels" "polars==$polars" "polars-runtime-32==$polars" "transformers==$transformers"
"$PY" -m pip install -q --no-deps --no-index --no-compile --python-version 3.12 --only-binary=:all: \
    --target "$stage/site" target/wheels/asa_analyze-*.whl "$stage"/wheels/*.whl
find "$stage/site" -name '*.so' -exec strip {} \;
mkdir -p target-gpu-python
tar -C "$stage/site" -cf - . | xz -T2 -6 > target-gpu-python/site.tar.xz
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+changes') polars $polars transformers $transformers" \
    > target-gpu-python/COMMIT
ls -la target-gpu-python
echo "built at $(cat target-gpu-python/COMMIT)"
