#!/usr/bin/env bash
# The GPU measurements behind docs/results.md, in phases of under ten minutes each.
# Usage: OUT=/some/dir bash benchmarks/gpu_session.sh [PHASE ...]   (docs/benchmarks.md, "Reproduce")
#   one GPU, torch: gemm eager handloop techniques repeat compile (the default), techniques-rest,
#     compile-reduce-overhead, capacity
#   torch against TensorFlow (benchmarks/h200/frameworks_*.yaml): tf-keras3, tf-legacy (tf_keras), tf-handloop,
#     tf-extra (recompute under tf.function and XLA, TF eager), frameworks-torch, frameworks-gemm
#   the bundled frameworks file, a precision a phase: frameworks-amp_bf16 (its default), frameworks-tf32,
#     frameworks-amp_fp16 (its --set precision= extensions), and its GEMM document: frameworks-gemm-document,
#     or a precision of it a phase: frameworks-gemm-fp32, -tf32, -bf16, -fp16 (resume:SESSION goes on with a
#     stopped one); EXECUTION (a value of --set execution=, e.g. compiled or '[eager, graph, cuda_graph]') splits a
#     ResNet-50 part in two sessions
#   what users run: defaults (execution: default, inputs device and host; its parts defaults-torch, defaults-jax,
#     defaults-tf-keras3, defaults-tf-legacy, defaults-compare), memory (allocator peak against a hand-written step),
#     memory-capacity (the same at the capacity search's largest fp32 batch with recompute)
#   why one side is slower (docs/profile.md): breakdown (its parts breakdown-torch, breakdown-tf-keras3,
#     breakdown-tf-legacy, breakdown-jax, breakdown-gemm-torch, breakdown-gemm-tf, breakdown-compare),
#     breakdown-gemm-xla (TensorFlow's XLA product in bf16 and fp16, ten processes each, each profiled),
#     breakdown-unprofiled (its own STORE; parts breakdown-unprofiled-torch, breakdown-unprofiled-tf)
#   Parts that need no TensorFlow (torch, jax, memory) can run on a machine where TensorFlow is not there yet.
#   A/A: aa-sessions (one GPU, two sessions), aa-sessions-warm (the same compiled, caches warm), aa-gpus (cuda:0 against cuda:1)
#   the largest batch that trains: cap-BACKEND-PRECISION-RECOMPUTE, one search a phase (cap-torch-fp32-none ...
#     cap-tf-amp_bf16-blocks); capacity-torch, capacity-torch-recompute, capacity-tf, capacity-tf-recompute,
#     capacity-tf-fp32, capacity-tf-fp32-blocks, capacity-tf-bf16-blocks, capacity-tf-nogrowth (two searches each)
#   two GPUs: dp-torch, dp-torch-compiled, dp-tf, dp-tf-xla, dp-variants-torch, dp-variants-tf, dp-tf-mirrored,
#     dp-tf-multi-worker (run in the same session as dp-tf-mirrored), gpu-comparison (gpu-comparison-torch and
#     gpu-comparison-tf: its two halves)
# On a two-GPU machine two phase lists can run at once, one per GPU:
#   CUDA_VISIBLE_DEVICES=0 STORE=$OUT/gpu0.db bash benchmarks/gpu_session.sh ... &
#   CUDA_VISIBLE_DEVICES=1 STORE=$OUT/gpu1.db bash benchmarks/gpu_session.sh ...; wait
# TIME_LIMIT (a harness run --time-limit: 540, 9m) bounds the frameworks-* and resume:* phases: no run is started
#   that earlier runs say would end after it, so a call's own limit never cuts a run short; go on with resume:SESSION.
#   Where each call starts with an empty $OUT, keep the store outside it (STORE=/tmp/frameworks.db): resume:SESSION
#   then finds the session in the next call on the same machine, and a copy of the store reaches $OUT after each phase.
# Results go to $STORE (default $OUT/h200.db, a harness store), copied to $OUT after each phase. Never delete a
#   store's -wal: records still in it are lost; checkpoint it.
# A machine without pydantic and without a package index: fetch its wheels into .whl first,
#   pip download --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#     -d .whl pydantic annotated-types typing-inspection typing-extensions
# and copy .whl beside this script's repository; the script installs them into $SITE (default /tmp/harness-site).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/harness-out}
mkdir -p "$OUT"
STORE=${STORE:-$OUT/h200.db}
H="python3 -m harness"
LIMIT=(${TIME_LIMIT:+--time-limit "$TIME_LIMIT"})
EXEC=(${EXECUTION:+--set "execution=$EXECUTION"})
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  SITE=${SITE:-/tmp/harness-site}
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl || exit 1
  export PYTHONPATH=$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
stamp() { echo "=== $* $(date -u +%FT%TZ)"; }
stamp setup
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
$H env
PHASES=${*:-gemm eager handloop techniques repeat compile}
# a phase that is a list of parts runs them in order
expand() {
  case $1 in
    breakdown) echo breakdown-torch breakdown-tf-keras3 breakdown-tf-legacy breakdown-jax breakdown-gemm-torch breakdown-gemm-tf \
      breakdown-compare ;;
    breakdown-unprofiled) echo breakdown-unprofiled-torch breakdown-unprofiled-tf ;;
    defaults) echo defaults-torch defaults-tf-keras3 defaults-tf-legacy defaults-jax defaults-compare ;;
    *) echo "$1" ;;
  esac
}
PHASES=$(for phase in $PHASES; do expand "$phase"; done)
JAX_PLUGIN=(env HARNESS_BACKENDS=jax=harness_jax:JaxBackend "PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD:$PWD/plugins/harness-jax")
for phase in $PHASES; do
  stamp "phase $phase"
  case $phase in
    gemm) $H run scenarios/gemm.yaml --backend torch --device cuda:0 --set 'size=[4096, 8192]' --store "$STORE" ;;
    eager) $H run benchmarks/h200/resnet50_eager.yaml --store "$STORE" ;;
    handloop)
      python3 benchmarks/torch_resnet50_handloop.py --batch-size 256 --precision tf32 --warmup 5 --steps 10 --repeats 5
      python3 benchmarks/torch_resnet50_handloop.py --batch-size 256 --precision amp_bf16 --channels-last --warmup 5 --steps 10 --repeats 5 ;;
    techniques) $H run benchmarks/h200/techniques.yaml --store "$STORE" ;;
    repeat) for i in 1 2 3 4 5; do $H run benchmarks/h200/repeatability.yaml --store "$STORE" -q | tail -1; done ;;
    compile) $H run benchmarks/h200/resnet50_compile.yaml --store "$STORE" ;;
    techniques-rest) $H run benchmarks/h200/techniques_rest.yaml --set measure.processes=1 --store "$STORE" ;;
    capacity) $H run benchmarks/h200/capacity.yaml --store "$STORE" ;;
    tf-keras3)
      $H run benchmarks/h200/frameworks_resnet50.yaml --backend tf --set tensorflow.keras=keras3 --set 'execution=[graph, compiled]' \
        --set measure.processes=1 --set measure.repeats=3 --store "$STORE" ;;
    tf-legacy)
      $H run benchmarks/h200/frameworks_resnet50.yaml --backend tf --set tensorflow.keras=tf_keras --set 'execution=[graph, compiled]' \
        --set measure.processes=1 --set measure.repeats=3 --store "$STORE" ;;
    frameworks-torch)
      $H run benchmarks/h200/frameworks_resnet50.yaml --backend torch --set 'execution=[eager, cuda_graph, compiled]' \
        --set measure.processes=1 --set measure.repeats=3 --store "$STORE" ;;
    frameworks-gemm)
      $H run benchmarks/h200/frameworks_gemm.yaml --set measure.processes=1 --set 'execution=[eager, cuda_graph, compiled]' \
        --store "$STORE" ;;
    tf-handloop)
      for mode in graph compiled; do for p in tf32 amp_bf16; do
        python3 benchmarks/tf_resnet50_handloop.py --precision $p --execution $mode --warmup 5 --steps 10 --repeats 3
      done; done ;;
    tf-extra)
      $H run benchmarks/h200/frameworks_resnet50.yaml --backend tf --set tensorflow.keras=keras3 --set precision=amp_bf16 \
        --set recompute=blocks --set 'execution=[graph, compiled]' --set measure.processes=1 --set measure.repeats=3 --store "$STORE"
      $H run benchmarks/h200/frameworks_resnet50.yaml --backend tf --set tensorflow.keras=keras3 --set precision=tf32 --set execution=eager \
        --set measure.processes=1 --set measure.warmup=2 --set measure.steps=5 --set measure.repeats=3 --store "$STORE" ;;
    aa-sessions)  # the same configuration in two sessions on one GPU
      $H run benchmarks/h200/aa_resnet50.yaml --store "$STORE" -q
      $H run benchmarks/h200/aa_resnet50.yaml --store "$STORE" -q
      $H compare --by session_id --store "$STORE" ;;
    aa-sessions-warm)  # the same with torch.compile and warm compiler caches (measure.compile_cache: warm)
      $H run benchmarks/h200/aa_resnet50_warm.yaml --store "$STORE" -q
      $H run benchmarks/h200/aa_resnet50_warm.yaml --store "$STORE" -q
      $H compare --by session_id --store "$STORE" ;;
    aa-gpus)  # cuda:0 against cuda:1 (a two-GPU machine)
      $H run benchmarks/h200/aa_gpus.yaml --store "$STORE" -q
      $H compare --by device --store "$STORE" ;;
    capacity-torch)  # torch searches, amp_bf16 and fp32 without recompute
      $H run benchmarks/h200/capacity.yaml --set recompute=none --store "$STORE" ;;
    capacity-torch-recompute)
      $H run benchmarks/h200/capacity.yaml --set recompute=blocks --store "$STORE" ;;
    capacity-tf)  # TensorFlow searches (tf.function, Keras 3), fp32 and amp_bf16 without recompute
      $H run benchmarks/h200/capacity.yaml --backend tf --set recompute=none --set execution=graph \
        --set tensorflow.keras=keras3 --store "$STORE" ;;
    capacity-tf-recompute)
      $H run benchmarks/h200/capacity.yaml --backend tf --set recompute=blocks --set execution=graph \
        --set tensorflow.keras=keras3 --store "$STORE" ;;
    capacity-tf-rest)  # three TF searches: fp32 without recompute, both precisions with it
      $H run benchmarks/h200/capacity.yaml --backend tf --set precision=fp32 --set recompute=none --set execution=graph \
        --set tensorflow.keras=keras3 --store "$STORE"
      $H run benchmarks/h200/capacity.yaml --backend tf --set recompute=blocks --set execution=graph \
        --set tensorflow.keras=keras3 --store "$STORE" ;;
    capacity-tf-fp32)  # TF fp32 without and with recompute
      for r in none blocks; do
        $H run benchmarks/h200/capacity.yaml --backend tf --set precision=fp32 --set recompute=$r --set execution=graph \
          --set tensorflow.keras=keras3 --store "$STORE"
      done ;;
    capacity-tf-fp32-blocks)  # TF fp32 with recompute (the second half of capacity-tf-fp32)
      $H run benchmarks/h200/capacity.yaml --backend tf --set precision=fp32 --set recompute=blocks --set execution=graph \
        --set tensorflow.keras=keras3 --store "$STORE" ;;
    cap-torch-*|cap-tf-*)  # one search a phase, e.g. cap-tf-fp32-none, cap-torch-amp_bf16-blocks
      rest=${phase#cap-}; backend=${rest%%-*}; rest=${rest#*-}; precision=${rest%-*}; recompute=${rest##*-}
      if [ "$backend" = tf ]; then extra=(--set execution=graph --set tensorflow.keras=keras3); else extra=(); fi
      $H run benchmarks/h200/capacity.yaml --backend "$backend" --set precision="$precision" --set recompute="$recompute" \
        "${extra[@]}" --store "$STORE" ;;
    capacity-tf-nogrowth)  # TF fp32 with TensorFlow's default allocator (growth off), against the growth-on answers
      for r in none blocks; do
        $H run benchmarks/h200/capacity.yaml --backend tf --set precision=fp32 --set recompute=$r --set execution=graph \
          --set tensorflow.keras=keras3 --set tensorflow.memory_growth=false --store "$STORE"
      done ;;
    capacity-tf-bf16-blocks)  # TF amp_bf16 with recompute
      $H run benchmarks/h200/capacity.yaml --backend tf --set precision=amp_bf16 --set recompute=blocks --set execution=graph \
        --set tensorflow.keras=keras3 --store "$STORE" ;;
    dp-tf-xla)  # two GPUs: TF XLA with 1 and 2 workers (failed on 2026-11-30 before the all-reduce left XLA)
      $H run benchmarks/h200/data_parallel.yaml --backend tf --set tensorflow.keras=keras3 --set execution=compiled --store "$STORE"
      $H compare --by replicas --store "$STORE" ;;
    dp-torch-compiled)  # two GPUs: torch.compile with DDP, 1 and 2 replicas (eager was measured on 2026-11-30)
      $H run benchmarks/h200/data_parallel.yaml --backend torch --set execution=compiled --store "$STORE"
      $H compare --by replicas --store "$STORE" ;;
    compile-reduce-overhead)  # the last technique row: torch.compile reduce-overhead at batch 32 (failed before its fix)
      $H run benchmarks/h200/resnet50_compile_reduce_overhead.yaml --store "$STORE" ;;
    dp-torch)  # two GPUs: DDP eager and torch.compile, 1 and 2 replicas
      $H run benchmarks/h200/data_parallel.yaml --backend torch --set 'execution=[eager, compiled]' --store "$STORE"
      $H compare --by replicas --store "$STORE" ;;
    dp-tf)  # two GPUs: MultiWorkerMirroredStrategy, tf.function and XLA, 1 and 2 replicas
      $H run benchmarks/h200/data_parallel.yaml --backend tf --set tensorflow.keras=keras3 --set 'execution=[graph, compiled]' \
        --store "$STORE"
      $H compare --by replicas --store "$STORE" ;;
    gpu-comparison)  # two GPUs: the two-GPU comparison file, both frameworks on cuda:0 and cuda:1 (~20 min; or its two halves below)
      $H run scenarios/gpu_comparison.yaml --set measure.processes=4 --store "$STORE"
      $H compare --by device --store "$STORE" ;;
    dp-variants-torch)  # two GPUs: torch.compile with DDP, optimize_ddp ddp_optimizer / no_optimization, 1 and 2 replicas
      $H run benchmarks/h200/data_parallel_variants.yaml --backend torch --store "$STORE"
      $H compare --by replicas --store "$STORE" ;;
    dp-variants-tf)  # two GPUs: TensorFlow XLA around strategy.run (distributed_xla=whole_step), 1 and 2 replicas
      $H run benchmarks/h200/data_parallel_variants.yaml --backend tf --store "$STORE"
      $H compare --by replicas --store "$STORE" ;;
    dp-tf-mirrored)  # two GPUs: TensorFlow MirroredStrategy in one process, XLA and tf.function, 1 and 2 replicas (~5 min)
      $H run benchmarks/h200/data_parallel_tf_mirrored.yaml --store "$STORE"
      $H compare --by replicas --store "$STORE" ;;
    dp-tf-multi-worker)  # the same with MultiWorkerMirroredStrategy, one worker process per GPU (~6 min), in the same session
      $H run benchmarks/h200/data_parallel_tf_multi_worker.yaml --store "$STORE"
      $H compare --by replicas --store "$STORE" ;;
    gpu-comparison-torch)  # the same, torch's half (~5 min); the file asks 4 processes a side, the fewest that can reach p < 0.05
      $H run scenarios/gpu_comparison.yaml --backend torch --store "$STORE"
      $H compare --by device --store "$STORE" ;;
    gpu-comparison-tf)  # TensorFlow's half (~6 min; finish with harness run --resume SESSION if it is stopped)
      $H run scenarios/gpu_comparison.yaml --backend tf --store "$STORE"
      $H compare --by device --store "$STORE" ;;
    frameworks-tf32|frameworks-amp_bf16|frameworks-amp_fp16)  # one precision of the bundled frameworks.yaml's ResNet-50
      # document at its defaults (calibrated blocks, processes: auto): compare --by backend pairs nothing across
      # precisions, so each part is a comparison of its own, measured on one machine. A part stopped by TIME_LIMIT
      # (or the ten minutes of one call) goes on with the phase resume:SESSION on the same machine.
      $H run scenarios/frameworks.yaml --document frameworks-resnet50 --set precision="${phase#frameworks-}" "${EXEC[@]}" \
        --store "$STORE" "${LIMIT[@]}"
      $H compare --by backend --store "$STORE" ;;
    frameworks-gemm-document)  # the bundled frameworks.yaml's GEMM document at its defaults, every precision
      $H run scenarios/frameworks.yaml --document frameworks-gemm --store "$STORE" "${LIMIT[@]}"
      $H compare --by backend --store "$STORE" ;;
    frameworks-gemm-fp32|frameworks-gemm-tf32|frameworks-gemm-bf16|frameworks-gemm-fp16)  # one precision of it:
      # a part of its own, like the ResNet-50 document's (compare --by backend pairs nothing across precisions)
      $H run scenarios/frameworks.yaml --document frameworks-gemm --set precision="${phase#frameworks-gemm-}" \
        --store "$STORE" "${LIMIT[@]}"
      $H compare --by backend --store "$STORE" ;;
    resume:*)  # go on with a stopped session of this store
      $H run --resume "${phase#resume:}" --store "$STORE" "${LIMIT[@]}" ;;
    defaults-*)  # what each framework's users run (execution: default: torch eager, Keras fit, JAX jit), tf32 and
      # amp_bf16 at batch 256, batches on the device and fed from host memory; one process a configuration
      D=(scenarios/defaults.yaml --set batch_size=256 --set 'precision=[tf32, amp_bf16]' --set measure.processes=1 --store "$STORE")
      case ${phase#defaults-} in
        torch) $H run "${D[@]}" --backend torch ;;
        tf-keras3) $H run "${D[@]}" --backend tf --set tensorflow.keras=keras3 ;;
        tf-legacy) $H run "${D[@]}" --backend tf --set tensorflow.keras=tf_keras ;;
        jax) "${JAX_PLUGIN[@]}" $H run "${D[@]}" --backend jax ;;
        compare) "${JAX_PLUGIN[@]}" $H compare --by backend --store "$STORE" ;;
        *) echo "unknown phase: $phase" >&2; exit 2 ;;
      esac ;;
    memory)  # harness's allocator peak against a hand-written torch step at the same batch (fp32, amp_bf16; recompute)
      python3 benchmarks/memory_vs_hand.py --batch-size 256 ;;
    memory-capacity)  # the same at the largest fp32 batch a capacity search found with recompute (4,156 on the H200)
      python3 benchmarks/memory_vs_hand.py --batch-size 4156 --modes probe --recompute blocks --precisions fp32 ;;
    breakdown-*)  # where each framework's ResNet-50 step goes (profiled after timing), and the GEMM sanity check;
      # breakdown-unprofiled-*: the same steps with profiling off (a STORE of its own): timed figures must not move
      # (the file lists the JAX plugin's backend, so it is registered for every part)
      B=(benchmarks/h200/breakdown.yaml --document breakdown-resnet50 --store "$STORE")
      case ${phase#breakdown-} in
        torch) "${JAX_PLUGIN[@]}" $H run "${B[@]}" --backend torch --set 'execution=[eager, cuda_graph, compiled]' ;;
        tf-keras3) "${JAX_PLUGIN[@]}" $H run "${B[@]}" --backend tf --set tensorflow.keras=keras3 --set 'execution=[graph, compiled]' ;;
        tf-legacy) "${JAX_PLUGIN[@]}" $H run "${B[@]}" --backend tf --set tensorflow.keras=tf_keras --set 'execution=[graph, compiled]' ;;
        jax) "${JAX_PLUGIN[@]}" $H run "${B[@]}" --backend jax --set execution=compiled ;;
        gemm-torch) "${JAX_PLUGIN[@]}" $H run benchmarks/h200/breakdown.yaml --document breakdown-gemm --backend torch --store "$STORE" ;;
        gemm-tf) "${JAX_PLUGIN[@]}" $H run benchmarks/h200/breakdown.yaml --document breakdown-gemm --backend tf --store "$STORE" ;;
        gemm-xla)  # XLA's lone bf16 and fp16 product, ten processes each, every one profiled: which kernel each ran
          "${JAX_PLUGIN[@]}" $H run benchmarks/h200/breakdown.yaml --document breakdown-gemm --backend tf --set execution=compiled \
            --set 'precision=[bf16, fp16]' --set measure.processes=10 --store "$STORE" ;;
        compare) "${JAX_PLUGIN[@]}" $H compare --by backend,execution --baseline torch,eager --breakdown --store "$STORE" ;;
        unprofiled-torch) "${JAX_PLUGIN[@]}" $H run "${B[@]}" --backend torch --set execution=eager --set measure.profile=false ;;
        unprofiled-tf) "${JAX_PLUGIN[@]}" $H run "${B[@]}" --backend tf --set tensorflow.keras=tf_keras --set execution=graph \
          --set measure.profile=false ;;
        *) echo "unknown phase: $phase" >&2; exit 2 ;;
      esac ;;
    *) echo "unknown phase: $phase" >&2; exit 2 ;;
  esac
  # the store whole in $OUT, with no -wal/-shm beside it
  if [ "$STORE" = "$OUT/$(basename "$STORE")" ]; then
    python3 -c "import sqlite3,sys; sqlite3.connect(sys.argv[1]).execute('pragma wal_checkpoint(TRUNCATE)')" "$STORE"
  else
    python3 -c "import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d); d.close()" "$STORE" "$OUT/$(basename "$STORE")"
  fi
done
$H results --store "$STORE" --format table
stamp done
