#!/usr/bin/env bash
# Build a virtual environment holding one framework pair and harness (editable, with its test tools).
#
#   scripts/make-env.sh ENV_DIR PAIR        PAIR: current | reference | gpu
#
# gpu is the current pair with TensorFlow's GPU build (`tensorflow[and-cuda]`, which brings the CUDA
# libraries TensorFlow needs) in place of tensorflow-cpu; torch from the registry is the CUDA build
# in every pair.
#
# The pair's versions come from constraints/PAIR.txt, used as a pip constraints file, so nothing
# harness or its test tools pull in can move the frameworks or numpy. Idempotent: an environment
# whose marker file (ENV_DIR/.harness-env) names the same pair, constraints and setup.cfg is reused
# as it is; an interrupted build is resumed. Prints the installed versions at the end.
#
# Environment: PYTHON (the interpreter for a new venv, default python3; the reference pair needs
# Python 3.8-3.11, the current pair 3.10+), PIP_ARGS (extra arguments for pip install).
set -euo pipefail

usage() {
    echo "usage: $0 ENV_DIR current|reference|gpu" >&2
    exit 2
}
[ $# -eq 2 ] || usage
ENV_DIR=$1
PAIR=$2
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CONSTRAINTS="$ROOT/constraints/$PAIR.txt"
[ -f "$CONSTRAINTS" ] || { echo "make-env: unknown pair '$PAIR' (no $CONSTRAINTS)" >&2; usage; }
PYTHON=${PYTHON:-python3}
# The framework packages; their versions are pinned in the constraints file.
FRAMEWORKS="torch torchvision tensorflow-cpu keras"
# the GPU pair: TensorFlow's GPU build and the CUDA libraries it loads (its `and-cuda` extra)
[ "$PAIR" = gpu ] && FRAMEWORKS="torch torchvision tensorflow[and-cuda] keras"
# TF 2.16+ builds Keras 2 models from the separate tf_keras package (options: {tensorflow: {keras: tf_keras}});
# TF 2.12 bundles Keras 2 as tf.keras. tf_keras's one requirement is `tensorflow` (the GPU build's name):
# resolved, it would bring that 572 MB wheel beside tensorflow-cpu and overwrite tensorflow-cpu's files in
# place (both stay installed, libtensorflow_cc.so.2 the GPU build's). So tf_keras is installed on its own
# with --no-deps: the pair's TensorFlow build, installed first, is the TensorFlow it needs.
TF_KERAS=""
[ "$PAIR" != reference ] && TF_KERAS="tf_keras"
# The pair's TensorFlow distribution: the only one an environment of this pair may hold.
TF_DIST=tensorflow-cpu
[ "$PAIR" = gpu ] && TF_DIST=tensorflow

mkdir -p "$ENV_DIR"
ENV_DIR=$(cd "$ENV_DIR" && pwd)
VPY="$ENV_DIR/bin/python"
MARKER="$ENV_DIR/.harness-env"

# The JAX backend, a separately installed plugin (plugins/harness-jax), with JAX's CPU wheels: in the current
# pair only. The reference pair gets none: jax 0.10+ needs numpy 2, and TF 2.12 holds numpy below 1.24.
JAX_PACKAGES=""
[ "$PAIR" = current ] && JAX_PACKAGES="jax==0.10.2 jaxlib==0.10.2 flax==0.12.8 optax==0.2.8"

sha() { sha256sum "$1" | cut -d' ' -f1; }
WANT="pair=$PAIR
constraints=$(sha "$CONSTRAINTS")
setup_cfg=$(sha "$ROOT/setup.cfg")
make_env=$(sha "$ROOT/scripts/make-env.sh")"
WANT="$WANT
harness_mlp=$(sha "$ROOT/plugins/harness-mlp/pyproject.toml")"
[ -n "$JAX_PACKAGES" ] && WANT="$WANT
jax=$JAX_PACKAGES
harness_jax=$(sha "$ROOT/plugins/harness-jax/pyproject.toml")"

print_versions() {
    "$VPY" - "$PAIR" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version

print(f"harness env ({sys.argv[1]}): {sys.prefix}")
print(f"  python {sys.version.split()[0]}")
# every TensorFlow distribution installed, so that a second one shows
for name in ("torch", "torchvision", "tensorflow", "tensorflow-cpu", "keras", "tf_keras", "jax", "numpy", "harness"):
    try:
        print(f"  {name} {version(name)}")
    except PackageNotFoundError:
        if not name.startswith("tensorflow"):
            print(f"  {name} (not installed)")
EOF
}

if [ -f "$MARKER" ]; then
    # complete, unless a TensorFlow distribution was installed into it since (pip install tf_keras brings one)
    if [ "$(cat "$MARKER")" = "$WANT" ] && "$VPY" -c 'import sys; from harness.machine.frameworks import tensorflow_problems as p; sys.exit(bool(p()))' 2>/dev/null; then
        echo "make-env: $ENV_DIR is complete for the $PAIR pair; reusing it"
        print_versions
        exit 0
    fi
    HAVE_PAIR=$(sed -n 's/^pair=//p' "$MARKER")
    if [ "$HAVE_PAIR" != "$PAIR" ]; then
        echo "make-env: $ENV_DIR holds the '$HAVE_PAIR' pair, not '$PAIR'; remove it first (rm -rf $ENV_DIR)" >&2
        exit 1
    fi
    if [ "$(cat "$MARKER")" = "$WANT" ]; then
        echo "make-env: $ENV_DIR holds more than one TensorFlow build; updating it"
    else
        echo "make-env: constraints/$PAIR.txt, setup.cfg or this script changed since $ENV_DIR was built; updating it"
    fi
    rm -f "$MARKER"
fi

if [ ! -x "$VPY" ]; then
    if [ "$PAIR" = reference ] && ! "$PYTHON" -c 'import sys; sys.exit(not (3, 8) <= sys.version_info[:2] <= (3, 11))'; then
        echo "make-env: the reference pair (torch 2.0.1, TF 2.12) has wheels for Python 3.8-3.11 only;" \
             "$PYTHON is $("$PYTHON" -c 'import sys; print(sys.version.split()[0])'). Set PYTHON=python3.11." >&2
        exit 1
    fi
    echo "make-env: creating $ENV_DIR with $("$PYTHON" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
    "$PYTHON" -m venv "$ENV_DIR"
fi

# What a new environment of this pair takes on disk (measured on x86_64, Python 3.11; torch is its CUDA build).
case "$PAIR" in current) NEED_GB=9 ;; gpu) NEED_GB=12 ;; *) NEED_GB=7 ;; esac
FREE_GB=$(df -Pk "$ENV_DIR" | awk 'NR == 2 { printf "%d", $4 / 1048576 }')
if [ -n "$FREE_GB" ] && [ "$FREE_GB" -lt "$NEED_GB" ]; then
    echo "make-env: warning: the $PAIR pair takes about $NEED_GB GB in $ENV_DIR and only $FREE_GB GB is free there;" \
         "pip may stop with 'No space left on device' (free some, or set PIP_NO_CACHE_DIR=1)" >&2
fi

echo "make-env: installing the $PAIR pair and harness[dev] (constraints/$PAIR.txt)"
cd "$ROOT"
# shellcheck disable=SC2086  # FRAMEWORKS and PIP_ARGS are word lists
"$VPY" -m pip install --progress-bar off ${PIP_ARGS:-} -c "$CONSTRAINTS" $FRAMEWORKS -e ".[dev]"
# An environment an earlier make-env built may hold a second TensorFlow distribution (tf_keras brought
# `tensorflow` beside tensorflow-cpu): uninstall every one (their files are the same paths) and put the
# pair's back, so that its files are its own again.
OTHER_TF=$("$VPY" -c 'import sys; from harness.machine.frameworks import tensorflow_distributions as t
print(" ".join(sorted(set(t()) - {sys.argv[1]})))' "$TF_DIST")
if [ -n "$OTHER_TF" ]; then
    echo "make-env: $ENV_DIR holds $OTHER_TF beside $TF_DIST, which overwrote its files; reinstalling $TF_DIST alone"
    # shellcheck disable=SC2086
    "$VPY" -m pip uninstall -y $OTHER_TF "$TF_DIST"
    # shellcheck disable=SC2086
    "$VPY" -m pip install --progress-bar off ${PIP_ARGS:-} -c "$CONSTRAINTS" --no-deps "$TF_DIST"
fi
if [ -n "$TF_KERAS" ]; then
    # shellcheck disable=SC2086
    "$VPY" -m pip install --progress-bar off ${PIP_ARGS:-} -c "$CONSTRAINTS" --no-deps $TF_KERAS
fi
# the example workload plugin (a model brought from outside harness: docs/architecture.md), in every pair
"$VPY" -m pip install --progress-bar off ${PIP_ARGS:-} -c "$CONSTRAINTS" --no-deps -e plugins/harness-mlp
if [ -n "$JAX_PACKAGES" ]; then
    echo "make-env: installing JAX (CPU) and the harness-jax plugin (plugins/harness-jax)"
    # shellcheck disable=SC2086
    "$VPY" -m pip install --progress-bar off ${PIP_ARGS:-} -c "$CONSTRAINTS" $JAX_PACKAGES -e plugins/harness-jax
fi

echo "make-env: checking the environment"
# tf_keras names `tensorflow`, which tensorflow-cpu is under another name: that line of pip check is expected.
CONFLICTS=$("$VPY" -m pip check 2>&1 | grep -v -e '^tf-keras [0-9.]* requires tensorflow, which is not installed' \
            -e '^No broken requirements found' || true)
[ -z "$CONFLICTS" ] || { echo "$CONFLICTS"; echo "make-env: warning: pip check reports the conflicts above" >&2; }
# One TensorFlow distribution, owning TensorFlow's files (harness.machine.frameworks).
"$VPY" -c 'import sys; from harness.machine.frameworks import tensorflow_problems as p; sys.exit("\n".join(p()) or None)' \
    || { echo "make-env: $ENV_DIR does not hold one TensorFlow build (above)" >&2; exit 1; }
# The installed framework versions must be the pinned ones.
"$VPY" - "$CONSTRAINTS" <<'EOF'
import re, sys
from importlib.metadata import version

pins = {}
for line in open(sys.argv[1], encoding="utf-8"):
    m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s#;]+)", line)
    if m:
        pins[m.group(1).lower().replace("_", "-")] = m.group(2)
bad = []
for name in ("torch", "torchvision", "tensorflow-cpu", "tensorflow", "keras", "tf-keras", "numpy"):
    if name in pins and version(name).split("+")[0] != pins[name]:
        bad.append(f"{name} {version(name)} (pinned {pins[name]})")
if bad:
    sys.exit("make-env: installed versions differ from the constraints: " + ", ".join(bad))
EOF
# Each framework imports (each in its own process, bounded: see docs/compat.md on import order).
for module in torch tensorflow harness.cli harness_mlp; do
    timeout 600 "$VPY" -c "import $module" || { echo "make-env: 'import $module' failed in $ENV_DIR" >&2; exit 1; }
done
if [ -n "$JAX_PACKAGES" ]; then
    timeout 600 "$VPY" -c "import jax, flax, optax, harness_jax; print('  jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, 'harness-jax')" \
        || { echo "make-env: importing JAX or the harness-jax plugin failed in $ENV_DIR" >&2; exit 1; }
fi

printf '%s\n' "$WANT" >"$MARKER"
echo "make-env: $ENV_DIR is complete"
print_versions
