#!/usr/bin/env bash
# The GPU measurements behind docs/benchmarks.md, in phases that each fit one device call (<10 min).
# Usage: OUT=/some/dir bash benchmarks/gpu_session.sh [PHASE ...]
#   phases of the first session (the default): gemm eager handloop techniques repeat compile
#   more phases: rest (issue 4's remaining rows, ~5 min, run on 2026-11-30), capacity (issue 5's whole file, ~12 min)
#   torch against TensorFlow (scenarios/frameworks.yaml; TensorFlow staged on the lent GPU machine,
#   every call after its staging starts with: eval "$(bash /tmp/tfsite/device.sh env)"):
#     tf-keras3 / tf-legacy (~5 min each: Keras 3 / tf_keras, graph and XLA, three precisions),
#     tf-handloop (~3 min: the hand-written TF loop), tf-extra (~3 min: recompute under tf.function
#     and XLA, TF eager), frameworks-torch (~5 min: torch eager, CUDA graph and torch.compile),
#     frameworks-gemm (~3 min: GEMM 4096, both frameworks)
#   issue 12: aa-session (~3 min), aa-gpus (~2 min, two GPUs); issue 11: capacity-torch,
#     capacity-torch-recompute, capacity-tf, capacity-tf-recompute (two searches each)
#   after the fourth session of 2026-11-30, left: gpu-comparison-torch and gpu-comparison-tf (the file changed:
#     TensorFlow trains through tf.function there, not eager), capacity-tf (TF fp32 and amp_bf16 without recompute
#     again, for a whole table from one session), capacity-tf-nogrowth (~11 min: one search per GPU, or two calls)
#   the fifth session of 2026-11-30 (issue 11's whole table from one session; TF probes keep cuDNN autotuning):
#     cap-BACKEND-PRECISION-RECOMPUTE, one search each (cap-torch-fp32-none ... cap-tf-amp_bf16-blocks)
#   the sixth session of 2026-11-30 (issue 17): dp-variants-tf (~3 min), dp-variants-torch (~5 min), gpu-comparison-tf
#   the seventh (issue 17, TensorFlow's strategies): dp-tf-mirrored (~5 min), dp-tf-multi-worker (~6 min)
#   phases of the second session: capacity-tf-rest (~8 min), compile-ro (~2 min),
#     dp-torch (~4 min, two GPUs), dp-tf (~5 min, two GPUs), gpu-comparison (~9 min, two GPUs);
#     the same split to fit calls: capacity-tf-fp32 (two searches), capacity-tf-bf16-blocks, dp-torch-compiled
# On a two-GPU machine two phase lists can run at once, one per GPU:
#   CUDA_VISIBLE_DEVICES=0 STORE=/tmp/gpu0.db bash benchmarks/gpu_session.sh ... &
#   CUDA_VISIBLE_DEVICES=1 STORE=/tmp/gpu1.db bash benchmarks/gpu_session.sh ...; wait
# Results go to $STORE (default $OUT/h200.db, a harness store), copied to $OUT after each phase. Never delete a
#   store's -wal to fit the files that come back: records still in it are lost (third session); checkpoint it.
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
    rest) $H run benchmarks/h200/issue4_rest.yaml --set measure.processes=1 --store "$STORE" ;;
    capacity) $H run benchmarks/h200/issue5_capacity.yaml --store "$STORE" ;;
    tf-keras3)
      $H run benchmarks/h200/issue10_resnet.yaml --backend tf --set tensorflow.keras=keras3 --set 'execution=[graph, compiled]' \
        --set measure.processes=1 --set measure.repeats=3 --store "$STORE" ;;
    tf-legacy)
      $H run benchmarks/h200/issue10_resnet.yaml --backend tf --set tensorflow.keras=tf_keras --set 'execution=[graph, compiled]' \
        --set measure.processes=1 --set measure.repeats=3 --store "$STORE" ;;
    frameworks-torch)
      $H run benchmarks/h200/issue10_resnet.yaml --backend torch --set 'execution=[eager, cuda_graph, compiled]' \
        --set measure.processes=1 --set measure.repeats=3 --store "$STORE" ;;
    frameworks-gemm)
      $H run benchmarks/h200/issue10_gemm.yaml --set measure.processes=1 --set 'execution=[eager, cuda_graph, compiled]' \
        --store "$STORE" ;;
    tf-handloop)
      for mode in graph compiled; do for p in tf32 amp_bf16; do
        python3 benchmarks/tf_resnet50_handloop.py --precision $p --execution $mode --warmup 5 --steps 10 --repeats 3
      done; done ;;
    tf-extra)
      $H run benchmarks/h200/issue10_resnet.yaml --backend tf --set tensorflow.keras=keras3 --set precision=amp_bf16 \
        --set recompute=blocks --set 'execution=[graph, compiled]' --set measure.processes=1 --set measure.repeats=3 --store "$STORE"
      $H run benchmarks/h200/issue10_resnet.yaml --backend tf --set tensorflow.keras=keras3 --set precision=tf32 --set execution=eager \
        --set measure.processes=1 --set measure.warmup=2 --set measure.steps=5 --set measure.repeats=3 --store "$STORE" ;;
    aa-session)  # issue 12: the same configuration in two sessions on one GPU
      $H run benchmarks/h200/issue12_aa_session.yaml --store "$STORE" -q
      $H run benchmarks/h200/issue12_aa_session.yaml --store "$STORE" -q
      $H compare --by session_id --store "$STORE" ;;
    aa-gpus)  # issue 12: cuda:0 against cuda:1 (a two-GPU machine)
      $H run benchmarks/h200/issue12_aa_gpus.yaml --store "$STORE" -q
      $H compare --by device --store "$STORE" ;;
    capacity-torch)  # issue 11: torch searches, amp_bf16 and fp32 without recompute
      $H run benchmarks/h200/issue5_capacity.yaml --set recompute=none --store "$STORE" ;;
    capacity-torch-recompute)
      $H run benchmarks/h200/issue5_capacity.yaml --set recompute=blocks --store "$STORE" ;;
    capacity-tf)  # issue 11: TensorFlow searches (tf.function, Keras 3), fp32 and amp_bf16 without recompute
      $H run benchmarks/h200/issue5_capacity.yaml --backend tf --set recompute=none --set execution=graph \
        --set tensorflow.keras=keras3 --store "$STORE" ;;
    capacity-tf-recompute)
      $H run benchmarks/h200/issue5_capacity.yaml --backend tf --set recompute=blocks --set execution=graph \
        --set tensorflow.keras=keras3 --store "$STORE" ;;
    capacity-tf-rest)  # issue 11: the three TF searches the second session of 2026-11-30 stopped early
      $H run benchmarks/h200/issue5_capacity.yaml --backend tf --set precision=fp32 --set recompute=none --set execution=graph \
        --set tensorflow.keras=keras3 --store "$STORE"
      $H run benchmarks/h200/issue5_capacity.yaml --backend tf --set recompute=blocks --set execution=graph \
        --set tensorflow.keras=keras3 --store "$STORE" ;;
    capacity-tf-fp32)  # issue 11, split for one GPU each: TF fp32 without and with recompute
      for r in none blocks; do
        $H run benchmarks/h200/issue5_capacity.yaml --backend tf --set precision=fp32 --set recompute=$r --set execution=graph \
          --set tensorflow.keras=keras3 --store "$STORE"
      done ;;
    capacity-tf-fp32-blocks)  # issue 11: TF fp32 with recompute (the half of capacity-tf-fp32 still unmeasured)
      $H run benchmarks/h200/issue5_capacity.yaml --backend tf --set precision=fp32 --set recompute=blocks --set execution=graph \
        --set tensorflow.keras=keras3 --store "$STORE" ;;
    cap-torch-*|cap-tf-*)  # issue 11, one search a phase, e.g. cap-tf-fp32-none, cap-torch-amp_bf16-blocks
      rest=${phase#cap-}; backend=${rest%%-*}; rest=${rest#*-}; precision=${rest%-*}; recompute=${rest##*-}
      if [ "$backend" = tf ]; then extra=(--set execution=graph --set tensorflow.keras=keras3); else extra=(); fi
      $H run benchmarks/h200/issue5_capacity.yaml --backend "$backend" --set precision="$precision" --set recompute="$recompute" \
        "${extra[@]}" --store "$STORE" ;;
    capacity-tf-nogrowth)  # issue 11: TF fp32 with TensorFlow's default allocator (growth off), against the growth-on answers
      for r in none blocks; do
        $H run benchmarks/h200/issue5_capacity.yaml --backend tf --set precision=fp32 --set recompute=$r --set execution=graph \
          --set tensorflow.keras=keras3 --set tensorflow.memory_growth=false --store "$STORE"
      done ;;
    capacity-tf-bf16-blocks)  # issue 11: TF amp_bf16 with recompute
      $H run benchmarks/h200/issue5_capacity.yaml --backend tf --set precision=amp_bf16 --set recompute=blocks --set execution=graph \
        --set tensorflow.keras=keras3 --store "$STORE" ;;
    dp-tf-xla)  # issue 17 (two GPUs): TF XLA with 1 and 2 workers (failed on 2026-11-30 before the all-reduce left XLA)
      $H run benchmarks/h200/issue17_dp.yaml --backend tf --set tensorflow.keras=keras3 --set execution=compiled --store "$STORE"
      $H compare --by replicas --store "$STORE" ;;
    dp-torch-compiled)  # issue 17 (two GPUs): torch.compile with DDP, 1 and 2 replicas (eager was measured on 2026-11-30)
      $H run benchmarks/h200/issue17_dp.yaml --backend torch --set execution=compiled --store "$STORE"
      $H compare --by replicas --store "$STORE" ;;
    compile-ro)  # issue 4's last row: torch.compile reduce-overhead at batch 32 (failed before its fix)
      $H run benchmarks/h200/issue4_compile_ro.yaml --store "$STORE" ;;
    dp-torch)  # issue 17 (two GPUs): DDP eager and torch.compile, 1 and 2 replicas
      $H run benchmarks/h200/issue17_dp.yaml --backend torch --set 'execution=[eager, compiled]' --store "$STORE"
      $H compare --by replicas --store "$STORE" ;;
    dp-tf)  # issue 17 (two GPUs): MultiWorkerMirroredStrategy, tf.function and XLA, 1 and 2 replicas
      $H run benchmarks/h200/issue17_dp.yaml --backend tf --set tensorflow.keras=keras3 --set 'execution=[graph, compiled]' \
        --store "$STORE"
      $H compare --by replicas --store "$STORE" ;;
    gpu-comparison)  # issue 17 (two GPUs): the two-GPU comparison file, both frameworks on cuda:0 and cuda:1 (~20 min: two calls)
      $H run scenarios/gpu_comparison.yaml --set measure.processes=4 --store "$STORE"
      $H compare --by device --store "$STORE" ;;
    dp-variants-torch)  # issue 17 (two GPUs): torch.compile with DDP, optimize_ddp ddp_optimizer / no_optimization, 1 and 2 replicas
      $H run benchmarks/h200/issue17_dp_variants.yaml --backend torch --store "$STORE"
      $H compare --by replicas --store "$STORE" ;;
    dp-variants-tf)  # issue 17 (two GPUs): TensorFlow XLA around strategy.run (distributed_xla=whole_step), 1 and 2 replicas
      $H run benchmarks/h200/issue17_dp_variants.yaml --backend tf --store "$STORE"
      $H compare --by replicas --store "$STORE" ;;
    dp-tf-mirrored)  # issue 17 (two GPUs): TensorFlow MirroredStrategy in one process, XLA and tf.function, 1 and 2 replicas (~5 min)
      $H run benchmarks/h200/issue17_tf_mirrored.yaml --store "$STORE"
      $H compare --by replicas --store "$STORE" ;;
    dp-tf-multi-worker)  # the same with MultiWorkerMirroredStrategy, one worker process per GPU (~6 min), in the same session
      $H run benchmarks/h200/issue17_tf_multi_worker.yaml --store "$STORE"
      $H compare --by replicas --store "$STORE" ;;
    gpu-comparison-torch)  # the same, torch's half (~5 min); the file asks 4 processes a side, the fewest that can reach p < 0.05
      $H run scenarios/gpu_comparison.yaml --backend torch --store "$STORE"
      $H compare --by device --store "$STORE" ;;
    gpu-comparison-tf)  # TensorFlow's half (~6 min; finish with harness run --resume SESSION if a call's time runs out)
      $H run scenarios/gpu_comparison.yaml --backend tf --store "$STORE"
      $H compare --by device --store "$STORE" ;;
    *) echo "unknown phase: $phase" >&2; exit 2 ;;
  esac
  # the store whole in $OUT, with no -wal/-shm beside it (what comes back from the device is counted in files)
  if [ "$STORE" = "$OUT/$(basename "$STORE")" ]; then
    python3 -c "import sqlite3,sys; sqlite3.connect(sys.argv[1]).execute('pragma wal_checkpoint(TRUNCATE)')" "$STORE"
  else
    python3 -c "import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d); d.close()" "$STORE" "$OUT/$(basename "$STORE")"
  fi
done
$H results --store "$STORE" --format table
stamp done
