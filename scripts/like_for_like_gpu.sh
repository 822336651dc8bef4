#!/usr/bin/env bash
# The GPU figures after the like-for-like changes (docs/execution.md, "Fairness points"), in parts of under ten
# minutes each where a part allows it. Nothing here has run on a GPU yet: each part is what the GPU run measures.
# Usage: OUT=/some/dir bash scripts/like_for_like_gpu.sh [PART ...]   (default: every part, in this order)
#   fp16        benchmarks/like_for_like/fp16_loss_scale.yaml: amp_fp16 eager and compiled, loss_scale dynamic
#               against static, torch, TensorFlow, JAX (torch's cuda_graph with static scaling: cuda-graph-fp16)
#   cuda-graph-fp16  torch's whole-step CUDA graph at amp_fp16 with loss_scale: static (no host sync to forbid it)
#   inputs      benchmarks/like_for_like/inputs.yaml: host-fed (one batch ahead on every side) against resident
#               batches, the default paths and the compiled step, Keras 3 and tf_keras
#   padding     benchmarks/like_for_like/padding.yaml: TensorFlow outside XLA after the padding change, profiled
#   frameworks  the bundled frameworks file part by part (benchmarks/gpu_session.sh frameworks-amp_bf16
#               frameworks-tf32 frameworks-amp_fp16), with the new padding, classifier and input pipelines
#   compare     the comparisons each part is read by, into $OUT/*.txt
# Results go to $STORE (default $OUT/like.db); TIME_LIMIT (seconds, e.g. 540) bounds each `harness run`, and
# `harness run --resume SESSION` goes on where a part stopped (docs/reliability.md).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/harness-like}
mkdir -p "$OUT"
STORE=${STORE:-$OUT/like.db}
H="python3 -m harness"
LIMIT=(${TIME_LIMIT:+--time-limit "$TIME_LIMIT"})
export PYTHONUNBUFFERED=1
stamp() { echo "=== $* $(date -u +%FT%TZ)"; }
stamp setup
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
$H env
for part in ${*:-fp16 cuda-graph-fp16 inputs padding frameworks compare}; do
  stamp "$part"
  case "$part" in
    fp16) $H run benchmarks/like_for_like/fp16_loss_scale.yaml --store "$STORE" "${LIMIT[@]}" ;;
    cuda-graph-fp16) $H run benchmarks/like_for_like/fp16_loss_scale.yaml --store "$STORE" --backend torch \
        --set loss_scale=static --set execution=cuda_graph "${LIMIT[@]}" ;;
    inputs) $H run benchmarks/like_for_like/inputs.yaml --store "$STORE" "${LIMIT[@]}" ;;
    padding) $H run benchmarks/like_for_like/padding.yaml --store "$STORE" "${LIMIT[@]}" ;;
    frameworks) STORE="$STORE" OUT="$OUT" bash benchmarks/gpu_session.sh frameworks-amp_bf16 frameworks-tf32 \
        frameworks-amp_fp16 ;;
    compare)
      $H compare --store "$STORE" --by backend > "$OUT/compare-backend.txt"
      $H compare --store "$STORE" --by loss_scale > "$OUT/compare-loss-scale.txt"
      $H compare --store "$STORE" --by inputs > "$OUT/compare-inputs.txt"
      $H compare --store "$STORE" --by backend --breakdown > "$OUT/compare-breakdown.txt" ;;
    *) echo "unknown part: $part" >&2; exit 2 ;;
  esac
done
stamp done
