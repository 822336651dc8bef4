#!/usr/bin/env bash
# The transformer's GPU figures (docs/transformer.md): GPT-2 small at seq 1024, amp_bf16, fused attention, held
# against the hand-written loops, every execution mode profiled, attention math beside fused, GPT-2 medium.
# Usage: OUT=/some/dir STORE=/some/store.db bash scripts/transformer_gpu.sh PART ...
#   torch  / jax / tensorflow   the hand-written loop (fastest mode, then eager or tf.function) into
#          $OUT/hand.jsonl, then `harness run transformer --backend B` in every mode but eager, profiled
#          (--profile), one process a configuration, then attention: math in the fastest mode, then eager
#          unprofiled (profiling an eager GPT-2 step took JAX minutes on an H100, and stopped tf_keras's
#          model.fit under a time limit)
#   tf_keras    the same harness runs with tf_keras (Keras 2) alone, and its tf.function hand loop
#   medium-B    GPT-2 medium (the named preset) in B's compiled step, each framework's fastest: MFU at the
#               larger size
#   compare     `harness compare` of the store by backend and by attention, into $OUT/*.txt
# The JAX backend is a plugin found through HARNESS_BACKENDS and PYTHONPATH (plugins/harness-jax), as in
# plugins/harness-jax/benchmarks/gpu_session.sh. TIME_LIMIT (seconds) bounds each `harness run`; what it
# leaves is resumable with `harness run --resume SESSION`.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/harness-transformer}
mkdir -p "$OUT"
STORE=${STORE:-$OUT/transformer.db}
H="python3 -m harness"
LIMIT=(${TIME_LIMIT:+--time-limit "$TIME_LIMIT"})
ONE=(--set measure.processes=1)
NOT_EAGER=(--set "execution=[compiled, graph, default, cuda_graph]" --profile)
export PYTHONUNBUFFERED=1 HARNESS_BACKENDS=jax=harness_jax:JaxBackend
export PYTHONPATH=$PWD:$PWD/plugins/harness-jax${PYTHONPATH:+:$PYTHONPATH}
stamp() { echo "=== $* $(date -u +%FT%TZ)"; }
hand() { local name=$1; shift; stamp "hand $name $*"; python3 "$@" | tee -a "$OUT/hand.jsonl"; }
for part in "$@"; do
  stamp "$part"
  case "$part" in
    torch)
      hand torch benchmarks/gpt_torch.py --compile
      hand torch benchmarks/gpt_torch.py
      $H run transformer --backend torch "${NOT_EAGER[@]}" --store "$STORE" "${ONE[@]}" "${LIMIT[@]}"
      $H run transformer --backend torch --set execution=compiled --set attention=math --store "$STORE" \
        "${ONE[@]}" "${LIMIT[@]}"
      $H run transformer --backend torch --set execution=eager --store "$STORE" "${ONE[@]}" "${LIMIT[@]}" ;;
    jax)
      hand jax plugins/harness-jax/benchmarks/gpt_jax.py
      $H run transformer --backend jax "${NOT_EAGER[@]}" --store "$STORE" "${ONE[@]}" "${LIMIT[@]}"
      $H run transformer --backend jax --set execution=compiled --set attention=math --store "$STORE" \
        "${ONE[@]}" "${LIMIT[@]}"
      $H run transformer --backend jax --set execution=eager --store "$STORE" "${ONE[@]}" "${LIMIT[@]}" ;;
    tensorflow)
      hand tensorflow benchmarks/gpt_tensorflow.py --compile
      hand tensorflow benchmarks/gpt_tensorflow.py
      $H run transformer --backend tensorflow --set tensorflow.keras=keras3 "${NOT_EAGER[@]}" --store "$STORE" \
        "${ONE[@]}" "${LIMIT[@]}"
      $H run transformer --backend tensorflow --set tensorflow.keras=keras3 --set execution=compiled \
        --set attention=math --store "$STORE" "${ONE[@]}" "${LIMIT[@]}"
      $H run transformer --backend tensorflow --set tensorflow.keras=keras3 --set execution=eager \
        --store "$STORE" "${ONE[@]}" "${LIMIT[@]}" ;;
    tf_keras)
      TF_USE_LEGACY_KERAS=1 hand tf_keras benchmarks/gpt_tensorflow.py
      $H run transformer --backend tensorflow --set tensorflow.keras=tf_keras "${NOT_EAGER[@]}" --store "$STORE" \
        "${ONE[@]}" "${LIMIT[@]}"
      $H run transformer --backend tensorflow --set tensorflow.keras=tf_keras --set execution=eager \
        --store "$STORE" "${ONE[@]}" "${LIMIT[@]}" ;;
    medium-*)
      $H run transformer --backend "${part#medium-}" --set preset=gpt2-medium --set execution=compiled \
        --store "$STORE" "${ONE[@]}" "${LIMIT[@]}" ;;
    compare)
      $H compare --store "$STORE" --by backend > "$OUT/compare-backend.txt"
      $H compare --store "$STORE" --by attention > "$OUT/compare-attention.txt"
      $H compare --store "$STORE" --by backend --breakdown > "$OUT/compare-breakdown.txt" ;;
    *) echo "unknown part: $part" >&2; exit 2 ;;
  esac
done
stamp done
