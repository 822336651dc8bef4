#!/usr/bin/env bash
# The JAX rows of docs/results.md, beside torch and TensorFlow, on an H200 (Python 3.12, the image's
# own JAX 0.11.2 with CUDA 13, Flax and Optax: nothing to carry but pydantic's wheels, as for
# benchmarks/gpu_session.sh). Each phase takes under ten minutes. From the repository root:
#
#   OUT=/some/dir bash plugins/harness-jax/benchmarks/gpu_session.sh [PHASE ...]
#     smoke      (~6 min)  every technique once at batch 64 (gpu_smoke.yaml) + the hand loop at batch 64
#     gemm       (~3 min)  benchmarks/h200/frameworks_gemm.yaml (GEMM 4096, four precisions, every mode)
#     compiled   (~3 min)  benchmarks/h200/frameworks_resnet50.yaml, batch 256 channels_last, jax.jit, three precisions
#                          (graph and cuda_graph are recorded as unsupported, with the reason)
#     handloop   (~2 min)  benchmarks/jax_resnet50_handloop.py at the same settings (tf32, amp_bf16)
#     eager      (~7 min)  the same file, op by op, fewer steps (as TensorFlow's eager rows)
#
# The backend is found without installing the plugin: PYTHONPATH names plugins/harness-jax and
# HARNESS_BACKENDS=jax=harness_jax:JaxBackend registers it (the core reads that variable, and so do its
# workers, which inherit it). Results go to $STORE (default $OUT/h200.db), copied to $OUT after each phase;
# the scenario names are those of scenarios/frameworks.yaml, so `harness compare --by backend` pairs the
# JAX rows with the torch and TensorFlow rows of the same configuration.
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/harness-out}
mkdir -p "$OUT"
STORE=${STORE:-$OUT/h200.db}
H="python3 -m harness"
PLUGIN=$PWD/plugins/harness-jax
export PYTHONUNBUFFERED=1 HARNESS_BACKENDS=jax=harness_jax:JaxBackend
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD:$PLUGIN
else
  export PYTHONPATH=$PWD:$PLUGIN${PYTHONPATH:+:$PYTHONPATH}
fi
# one worker per configuration where this harness runs several (measure.processes)
ONE=$(python3 -c 'from harness.scenario.load import Measure; print("--set measure.processes=1" if "processes" in Measure.model_fields else "")')
stamp() { echo "=== $* $(date -u +%FT%TZ)"; }
stamp setup
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
python3 -c 'import jax, flax, optax; print("jax", jax.__version__, "flax", flax.__version__, "optax", optax.__version__, jax.devices())'
$H list | sed -n '/^Backends:/,$p'
PHASES=${*:-gemm compiled handloop eager}
for phase in $PHASES; do
  stamp "phase $phase"
  case $phase in
    smoke)
      $H run "$PLUGIN/benchmarks/gpu_smoke.yaml" $ONE --store "$STORE"
      python3 "$PLUGIN/benchmarks/jax_resnet50_handloop.py" --batch-size 64 --precision amp_bf16 --warmup 2 --steps 5 --repeats 2 ;;
    gemm) $H run benchmarks/h200/frameworks_gemm.yaml --backend jax $ONE --store "$STORE" ;;
    compiled)
      $H run benchmarks/h200/frameworks_resnet50.yaml --backend jax --set 'execution=[graph, cuda_graph, compiled]' \
        $ONE --set measure.repeats=3 --store "$STORE" ;;
    handloop)
      for p in tf32 amp_bf16 amp_fp16; do
        python3 "$PLUGIN/benchmarks/jax_resnet50_handloop.py" --batch-size 256 --precision $p --warmup 5 --steps 10 --repeats 3
      done ;;
    eager)
      $H run benchmarks/h200/frameworks_resnet50.yaml --backend jax --set execution=eager $ONE \
        --set measure.warmup=2 --set measure.steps=5 --set measure.repeats=3 --store "$STORE" ;;
    *) echo "unknown phase: $phase" >&2; exit 2 ;;
  esac
  [ "$STORE" = "$OUT/h200.db" ] || cp "$STORE" "$OUT/h200.db"
done
$H results --store "$STORE" --format table
stamp done
