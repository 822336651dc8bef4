#!/usr/bin/env bash
# The GPU measurements behind docs/benchmarks.md, in phases that each fit one device call (<10 min).
# Usage: OUT=/some/dir bash benchmarks/gpu_session.sh [PHASE ...]
#   phases of the first session (the default): gemm eager handloop techniques repeat compile
#   phases not yet run on a GPU: rest (issue 4's remaining rows, ~6 min), capacity (issue 5, ~8 min)
#   torch against TensorFlow (scenarios/frameworks.yaml; TensorFlow through ../shared/tools/tf-gpu,
#   every call after its staging starts with: eval "$(bash /tmp/tfsite/device.sh env)"):
#     tf-keras3 (~7 min: Keras 3 graph and XLA, three precisions, and the hand-written TF loop),
#     tf-legacy (~7 min: tf_keras graph and XLA, recompute under tf.function and XLA, TF eager),
#     frameworks-torch (~5 min: torch eager, CUDA graph and torch.compile), frameworks-gemm (~3 min: GEMM 4096)
# Results go to $STORE (default $OUT/h200.db, a harness store), copied to $OUT after each phase.
# The lent GPU machine (Python 3.12, no registry) lacks pydantic: fetch its wheels into .whl first,
#   pip download --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#     -d .whl pydantic annotated-types typing-inspection typing-extensions
# and carry .whl with the call; this script installs them into /tmp/site.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/harness-out}
mkdir -p "$OUT"
STORE=${STORE:-$OUT/h200.db}
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
    tf-keras3)
      $H run benchmarks/h200/issue10_resnet.yaml --backend tf --set tensorflow.keras=keras3 --set 'execution=[graph, compiled]' \
        --set measure.processes=1 --set measure.repeats=3 --store "$STORE"
      for mode in graph compiled; do for p in tf32 amp_bf16; do
        python3 benchmarks/tf_resnet50_handloop.py --precision $p --execution $mode --warmup 5 --steps 10 --repeats 3
      done; done ;;
    tf-legacy)
      $H run benchmarks/h200/issue10_resnet.yaml --backend tf --set tensorflow.keras=tf_keras --set 'execution=[graph, compiled]' \
        --set measure.processes=1 --set measure.repeats=3 --store "$STORE"
      $H run benchmarks/h200/issue10_resnet.yaml --backend tf --set tensorflow.keras=keras3 --set precision=amp_bf16 \
        --set recompute=blocks --set 'execution=[graph, compiled]' --set measure.processes=1 --set measure.repeats=3 --store "$STORE"
      $H run benchmarks/h200/issue10_resnet.yaml --backend tf --set tensorflow.keras=keras3 --set precision=tf32 --set execution=eager \
        --set measure.processes=1 --set measure.warmup=2 --set measure.steps=5 --set measure.repeats=3 --store "$STORE" ;;
    frameworks-torch)
      $H run benchmarks/h200/issue10_resnet.yaml --backend torch --set 'execution=[eager, cuda_graph, compiled]' \
        --set measure.processes=1 --set measure.repeats=3 --store "$STORE" ;;
    frameworks-gemm)
      $H run benchmarks/h200/issue10_gemm.yaml --set measure.processes=1 --store "$STORE" ;;
    *) echo "unknown phase: $phase" >&2; exit 2 ;;
  esac
  [ "$STORE" = "$OUT/h200.db" ] || cp "$STORE" "$OUT/h200.db"
done
$H results --store "$STORE" --format table
stamp done
