#!/usr/bin/env bash
# The GPU measurements behind docs/benchmarks.md, in one call of under 10 minutes.
# Usage: OUT=/some/dir bash benchmarks/gpu_session.sh
# Results go to $OUT/h200.db (a harness store); the console to $OUT/session.log.
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
stamp "issue 2: gemm"
$H run scenarios/gemm.yaml --backend torch --device cuda:0 --set 'size=[4096, 8192]' --store "$STORE"
stamp "issue 3: eager"
$H run benchmarks/h200/issue3_eager.yaml --store "$STORE"
stamp "issue 3: hand-written loop"
python3 benchmarks/torch_resnet50_handloop.py --batch-size 256 --precision tf32 --warmup 5 --steps 10 --repeats 5
python3 benchmarks/torch_resnet50_handloop.py --batch-size 256 --precision amp_bf16 --channels-last --warmup 5 --steps 10 --repeats 5
stamp "issue 4: techniques"
$H run benchmarks/h200/issue4_techniques.yaml --store "$STORE"
stamp "issue 7: five sessions"
for i in 1 2 3 4 5; do $H run benchmarks/h200/issue7_repeat.yaml --store "$STORE" -q | tail -1; done
stamp "issue 4: torch.compile"
$H run benchmarks/h200/issue4_compile.yaml --store "$STORE"
stamp done
