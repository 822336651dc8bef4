#!/usr/bin/env bash
# The GPU measurements behind docs/benchmarks.md, in phases that each fit one device call (<10 min).
# Usage: OUT=/some/dir bash benchmarks/gpu_session.sh [PHASE ...]
#   phases of the first session (the default): gemm eager handloop techniques repeat compile
#   phases not yet run on a GPU: rest (issue 4's remaining rows, ~6 min), capacity (issue 5, ~8 min)
# Results go to $OUT/h200.db (a harness store); the console to $OUT/session.log.
# The lent GPU machine (Python 3.12, no registry) lacks pydantic: fetch its wheels into .whl first,
#   pip download --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#     -d .whl pydantic annotated-types typing-inspection typing-extensions
# and carry .whl with the call; this script installs them into /tmp/site.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/harness-out}
mkdir -p "$OUT"
STORE="$OUT/h200.db"
H="python3 -m harness"
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
stamp() { echo "=== $* $(date -u +%FT%TZ)"; }
stamp setup
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
$H env
PHASES=${*:-gemm eager handloop techniques repeat compile}
for phase in $PHASES; do
  stamp "phase $phase"
  case $phase in
    gemm) $H run scenarios/gemm.yaml --backend torch --device cuda:0 --set 'size=[4096, 8192]' --store "$STORE" ;;
    eager) $H run benchmarks/h200/issue3_eager.yaml --store "$STORE" ;;
    handloop)
      python3 benchmarks/torch_resnet50_handloop.py --batch-size 256 --precision tf32 --warmup 5 --steps 10 --repeats 5
      python3 benchmarks/torch_resnet50_handloop.py --batch-size 256 --precision amp_bf16 --channels-last --warmup 5 --steps 10 --repeats 5 ;;
    techniques) $H run benchmarks/h200/issue4_techniques.yaml --store "$STORE" ;;
    repeat) for i in 1 2 3 4 5; do $H run benchmarks/h200/issue7_repeat.yaml --store "$STORE" -q | tail -1; done ;;
    compile) $H run benchmarks/h200/issue4_compile.yaml --store "$STORE" ;;
    rest) $H run benchmarks/h200/issue4_rest.yaml --store "$STORE" ;;
    capacity) $H run benchmarks/h200/issue5_capacity.yaml --store "$STORE" ;;
    *) echo "unknown phase: $phase" >&2; exit 2 ;;
  esac
done
$H results --store "$STORE" --format table
stamp done
