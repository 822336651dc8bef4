"""The version facts harness depends on, checked in whichever environment the suite runs in.

Two environments are tested (docs/compat.md): the current pair (torch 2.14, TF 2.21 + Keras 3) and
the reference pair (torch 2.0.1, TF 2.12 + Keras 2.12, numpy 1.23). Versions are read from package
metadata; anything that needs a framework imported runs in a subprocess of its own, one framework
per process, so this file never imports torch or TensorFlow into the pytest process (and cannot
meet the TF-before-torch import hang).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: The releases harness supports (docs/compat.md): torch 2.0-2.14, TensorFlow 2.12-2.21.
TORCH_RANGE = ((2, 0), (2, 14))
TF_RANGE = ((2, 12), (2, 21))


def _installed(*names: str) -> str | None:
    """The version of the first of `names` that is installed (metadata only; nothing is imported)."""
    for name in names:
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return None


def _major_minor(text: str) -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", text)
    assert match, f"unparsable version {text!r}"
    return int(match.group(1)), int(match.group(2))


TORCH = _installed("torch")
TORCHVISION = _installed("torchvision")
TF = _installed("tensorflow", "tensorflow-cpu")
KERAS = _installed("keras")
NUMPY = _installed("numpy")

needs_torch = pytest.mark.skipif(TORCH is None, reason="torch is not installed in this environment")
needs_tf = pytest.mark.skipif(TF is None, reason="tensorflow is not installed in this environment")


def _run_python(code: str, timeout: float = 300) -> dict:
    """Run `code` in a fresh interpreter of this environment; return the JSON it prints last."""
    # CPU only unless the caller chose devices: these are API facts, and TF would take GPU memory at start
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- versions -----------------------------------------------------------------------------------


def test_python_is_supported():
    assert sys.version_info >= (3, 9), "setup.cfg says python_requires >= 3.9"


@needs_torch
def test_torch_is_a_supported_release():
    assert TORCH_RANGE[0] <= _major_minor(TORCH) <= TORCH_RANGE[1], f"torch {TORCH} is outside 2.0-2.14"


@needs_torch
def test_torchvision_matches_torch():
    # torchvision 0.15 goes with torch 2.0, 0.16 with 2.1, ... 0.29 with 2.14
    assert TORCHVISION is not None, "torch is installed without torchvision (the resnet50 workload needs it)"
    t_major, t_minor = _major_minor(TORCH)
    v_major, v_minor = _major_minor(TORCHVISION)
    assert (v_major, v_minor) == (0, t_minor + 15), f"torchvision {TORCHVISION} does not go with torch {TORCH}"


@needs_tf
def test_tensorflow_is_a_supported_release():
    assert TF_RANGE[0] <= _major_minor(TF) <= TF_RANGE[1], f"tensorflow {TF} is outside 2.12-2.21"


@needs_tf
def test_keras_generation_matches_tensorflow():
    """TF 2.12-2.15 use Keras 2 of the same minor release; TF 2.16+ use Keras 3."""
    assert KERAS is not None, "tensorflow is installed without keras"
    tf_mm, keras_mm = _major_minor(TF), _major_minor(KERAS)
    if tf_mm < (2, 16):
        assert keras_mm == tf_mm, f"TF {TF} goes with Keras {tf_mm[0]}.{tf_mm[1]}, found keras {KERAS}"
    else:
        assert keras_mm[0] == 3, f"TF {TF} goes with Keras 3, found keras {KERAS}"


@needs_tf
def test_numpy_fits_tensorflow():
    # TF 2.12 requires numpy>=1.22,<1.24 (the reference env has 1.23.5); later TFs take numpy 2
    if _major_minor(TF) == (2, 12):
        assert (1, 22) <= _major_minor(NUMPY) < (1, 24), f"TF {TF} needs numpy 1.22-1.23, found {NUMPY}"


def test_numpy_stack_imports_and_works():
    """pandas, scipy, matplotlib and pyarrow (parquet export) run with the numpy installed here."""
    facts = _run_python(
        """
        import json, io, importlib.util
        import numpy as np, pandas as pd, scipy.stats, matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        frame = pd.DataFrame({"x": np.arange(5, dtype=np.float64), "s": list("abcde")})
        p = scipy.stats.mannwhitneyu([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]).pvalue
        fig = plt.figure(); plt.plot(frame["x"]); fig.savefig(io.BytesIO(), format="png")
        parquet = None
        if importlib.util.find_spec("pyarrow"):  # installed (the dev and parquet extras): it must import with this numpy
            import pyarrow
            buffer = io.BytesIO()
            frame.to_parquet(buffer)
            buffer.seek(0)
            parquet = pd.read_parquet(buffer).equals(frame)
        print(json.dumps({"p": float(p), "parquet": parquet}), flush=True)
        import os
        os._exit(0)  # the facts are out; Arrow's thread pools can abort a normal teardown (apache/arrow#34314)
        """
    )
    assert 0 < facts["p"] < 1
    assert facts["parquet"] is (True if _installed("pyarrow") else None)


# --- the compat modules pick the branch the installed release needs ------------------------------


@needs_torch
def test_torch_compat_branches_match_the_installed_torch():
    facts = _run_python(
        """
        import json, sys
        import torch
        from backends.torch import compat, out_of_memory_errors
        from harness.errors import Unsupported

        facts = {"compat_version": list(compat.torch_version()), "has_amp_grad_scaler": hasattr(torch.amp, "GradScaler")}
        try:
            facts["cpu_scaler_api"] = compat.grad_scaler("cpu")[1]
        except Unsupported as exc:
            facts["cpu_scaler_api"] = None
        facts["compile_reason"] = compat.compile_unsupported_reason()
        if facts["compile_reason"] is not None and hasattr(torch, "compile"):
            try:  # the reason must be true: torch.compile itself refuses (cheap: it fails before compiling)
                torch.compile(lambda x: x + 1)(torch.ones(1))
                facts["compile_raised"] = False
            except Exception as exc:
                facts["compile_raised"] = type(exc).__name__ + ": " + str(exc).splitlines()[0]
        facts["oom"] = sorted(f"{c.__module__}.{c.__qualname__}" for c in out_of_memory_errors())
        facts["has_torch_oom"] = hasattr(torch, "OutOfMemoryError")
        facts["cpu_capability"] = compat.cpu_capability()
        print(json.dumps(facts))
        """
    )
    installed = _major_minor(TORCH)
    assert tuple(facts["compat_version"]) == installed

    # GradScaler: torch.amp.GradScaler(device) from 2.3; before, torch.cuda.amp.GradScaler only (no CPU scaler)
    assert facts["has_amp_grad_scaler"] == (installed >= (2, 3))
    if installed >= (2, 3):
        assert facts["cpu_scaler_api"] == "torch.amp.GradScaler('cpu')"
    else:
        assert facts["cpu_scaler_api"] is None

    # torch.compile: none on Python 3.11+ in torch 2.0.x; available from 2.1
    if installed < (2, 1) and sys.version_info >= (3, 11):
        assert facts["compile_reason"] and "3.11" in facts["compile_reason"]
        assert facts["compile_raised"], "compat says torch.compile is unavailable, but it ran"
    elif sys.version_info < (3, 13):
        assert facts["compile_reason"] is None, facts["compile_reason"]

    # out of memory: torch.cuda.OutOfMemoryError always; torch.OutOfMemoryError where it exists
    assert any(name.endswith("OutOfMemoryError") for name in facts["oom"]), facts["oom"]
    assert len(facts["oom"]) >= 1
    # torch.backends.cpu.get_cpu_capability arrived in 2.1
    assert (facts["cpu_capability"] is None) == (installed < (2, 1))


@needs_tf
def test_tensorflow_compat_branches_match_the_installed_tensorflow():
    facts = _run_python(
        """
        import json
        import tensorflow as tf
        from backends.tensorflow import compat

        keras = compat.keras
        facts = {
            "tf": tf.__version__,
            "keras_version": compat.keras_version(),
            "keras_major": compat.keras_major(),
            "policy_api": compat.set_global_policy("float32"),
            "sync_api": compat.device_sync()[1],
            "remat_scope": compat.has_remat_scope(),
        }
        opt = keras.optimizers.SGD(0.1)
        var = tf.Variable([1.0])
        update = compat.optimizer_update(opt, [var], loss_scaling="dynamic")
        facts["loss_scale_api"] = update.api
        facts["loss_scale"] = compat.loss_scale_value(update.optimizer)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(var * var)
            scaled = update.scale(loss)
        update.apply(tape.gradient(scaled, [var]), [var])
        facts["var_after_step"] = float(var.numpy()[0])
        compat.reset_memory_stats("CPU:0")
        facts["cpu_peak"] = compat.peak_memory_bytes("CPU:0")
        try:
            tf.config.experimental.get_memory_info("CPU:0")
            facts["cpu_stats"] = True
        except ValueError:  # "Allocator stats not available": TF keeps none for the CPU without oneDNN
            facts["cpu_stats"] = False
        print(json.dumps(facts))
        """
    )
    tf_mm = _major_minor(TF)
    assert _major_minor(facts["tf"]) == tf_mm
    keras3 = tf_mm >= (2, 16) and os.environ.get("TF_USE_LEGACY_KERAS") not in ("1", "true", "True")
    assert facts["keras_major"] == (3 if keras3 else 2), facts["keras_version"]
    if keras3:
        assert facts["policy_api"].startswith("keras.config.set_dtype_policy")
        assert "scale_loss" in facts["loss_scale_api"] and "get_scaled_loss" not in facts["loss_scale_api"]
        # keras.RematScope from Keras 3.9
        assert facts["remat_scope"] == (_major_minor(facts["keras_version"]) >= (3, 9))
    else:
        assert facts["policy_api"].startswith("tf.keras.mixed_precision.set_global_policy")
        assert "get_scaled_loss" in facts["loss_scale_api"]
        assert facts["remat_scope"] is False
    assert facts["loss_scale"] and facts["loss_scale"] > 1
    # one SGD step on x**2 from x=1 with lr 0.1, unscaled: 1 - 0.1 * 2 = 0.8
    assert facts["var_after_step"] == pytest.approx(0.8)
    # tf.test.experimental.sync_devices exists from TF 2.12, the oldest supported
    assert facts["sync_api"] == "tf.test.experimental.sync_devices()"
    # get_memory_info answers for CPU:0 in TF 2.12 and 2.21 where oneDNN is on (x86 CPUs with AVX-512, seen on
    # both); elsewhere TF keeps no CPU allocator statistics and compat says None rather than raising
    assert isinstance(facts["cpu_peak"], int) if facts["cpu_stats"] else facts["cpu_peak"] is None


# --- import order -------------------------------------------------------------------------------


@needs_torch
@needs_tf
def test_torch_then_tensorflow_import_in_one_process():
    """torch first, then TensorFlow, in one process works in both environments (docs/compat.md).

    The other order can hang at `import torch` with TF 2.12 and torch 2.0.x; harness never needs
    both in one process (one worker per run), and the core imports neither.
    """
    facts = _run_python(
        """
        import json
        import torch
        import tensorflow as tf
        print(json.dumps({"torch": torch.__version__, "tf": tf.__version__, "sum": float(tf.reduce_sum(tf.constant(torch.ones(3).numpy())))}))
        """,
        timeout=300,
    )
    assert facts["sum"] == 3.0


def test_triton_is_loaded_before_tensorflow_in_the_test_process_and_that_order_works():
    """Triton after TensorFlow 2.21 segfaults (docs/compat.md); conftest.py loads it right after torch."""
    import importlib.util

    if importlib.util.find_spec("triton") is None or importlib.util.find_spec("tensorflow") is None:
        pytest.skip("needs triton and tensorflow")
    assert "triton" in sys.modules  # conftest imported it, before any test module could load TensorFlow
    facts = _run_python(
        """
        import json
        import torch, triton
        import tensorflow as tf
        print(json.dumps({"sum": float(tf.reduce_sum(tf.constant([1.0, 2.0])))}))
        """,
        timeout=300,
    )
    assert facts["sum"] == 3.0


def test_core_imports_neither_framework():
    facts = _run_python(
        """
        import json, sys
        import harness, harness.cli, harness.session.runner, harness.results.store, harness.timing.stats
        print(json.dumps({"loaded": sorted(m for m in ("torch", "tensorflow", "keras") if m in sys.modules)}))
        """
    )
    assert facts["loaded"] == []
