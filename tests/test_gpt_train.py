"""gpt_train: the neutral half (sizes, presets, parameter and FLOP counts, token batches), and the same function
on every framework: weights drawn once with numpy from the seed (gpt_train.weights), loaded into each framework's
model part, give the same loss on the same batch within 1e-4 relative in float32, and the same loss after one
AdamW step within 1e-3, for each pair of frameworks and both attention paths. A framework that is not installed
(JAX in the reference era) skips its pairs. Tiny sizes: 2 layers, d_model 64, seq_len 32, vocabulary 128."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import numpy as np
import pydantic
import pytest

from harness.workloads import WORKLOADS
from harness.workloads.gpt_train import (
    GPT_TRAIN,
    PRESETS,
    flops_parameters,
    parameter_count,
    synthetic_batch,
    train_flops_per_token,
    weight_shapes,
    weights,
)

PLUGIN = Path(__file__).resolve().parent.parent / "plugins" / "harness-jax"
TINY = {"n_layer": 2, "n_head": 4, "d_model": 64, "seq_len": 32, "vocab_size": 128, "batch_size": 4}
FRAMEWORKS = ("torch", "tensorflow", "jax")
PAIRS = [(a, b) for i, a in enumerate(FRAMEWORKS) for b in FRAMEWORKS[i + 1:]]


def tiny(**changes):
    return GPT_TRAIN.validate({**TINY, **changes})


# --- the neutral half ---------------------------------------------------------------------------------------------


def test_gpt_train_is_a_bundled_training_workload_with_tokens_per_second():
    assert WORKLOADS["gpt_train"] is GPT_TRAIN and WORKLOADS.source("gpt_train") == "harness"
    assert GPT_TRAIN.unit == "tokens/s" and GPT_TRAIN.training is not None
    spec = GPT_TRAIN.training.optimizer(tiny())
    assert (spec.name, spec.lr, spec.betas, spec.eps, spec.weight_decay, spec.decay) == (
        "adamw", 6e-4, (0.9, 0.95), 1e-8, 0.1, "matrices")


def test_presets_give_gpt2_small_and_medium_and_explicit_sizes_override_them():
    small, medium = GPT_TRAIN.validate({}), GPT_TRAIN.validate({"preset": "gpt2-medium"})
    assert (small.n_layer, small.n_head, small.d_model, small.vocab_size, small.seq_len) == (12, 12, 768, 50304, 1024)
    assert (medium.n_layer, medium.n_head, medium.d_model) == PRESETS["gpt2-medium"]
    # nanoGPT's counts at vocabulary 50,304: 124.5M (123.7M without the position embedding) and 354.9M
    assert parameter_count(small) == 124_475_904 and flops_parameters(small) == 123_689_472
    assert parameter_count(medium) == 354_871_296
    assert GPT_TRAIN.validate({"n_layer": 2}).n_layer == 2 and GPT_TRAIN.validate({"n_layer": 2}).d_model == 768


def test_a_width_that_heads_do_not_divide_and_an_unknown_preset_are_refused():
    with pytest.raises(pydantic.ValidationError, match="multiple of n_head"):
        GPT_TRAIN.validate({"d_model": 100, "n_head": 3})
    with pytest.raises(pydantic.ValidationError, match="preset"):
        GPT_TRAIN.validate({"preset": "gpt3"})


def test_the_neutral_layout_holds_every_parameter_once():
    p = tiny()
    assert sum(int(np.prod(s)) for s in weight_shapes(p).values()) == parameter_count(p) == 110_336
    drawn = weights(p, 0)
    assert all(drawn[name].shape == shape and drawn[name].dtype == np.float32 for name, shape in weight_shapes(p).items())
    assert np.array_equal(drawn["h.0.ln_1.weight"], np.ones(64)) and not drawn["h.1.mlp.c_fc.bias"].any()
    # residual projections scaled by 1/sqrt(2 * n_layer), as nanoGPT initialises them
    assert drawn["h.0.attn.c_proj.weight"].std() == pytest.approx(0.01, rel=0.1)
    assert drawn["wte"].std() == pytest.approx(0.02, rel=0.1)


def test_flops_are_the_palm_formula_per_token_times_the_tokens_of_a_step():
    p = tiny(grad_accum=2)
    per_token = 6 * flops_parameters(p) + 12 * 2 * 4 * 16 * 32
    assert train_flops_per_token(p) == per_token
    assert GPT_TRAIN.items_per_step(p) == 4 * 32 * 2
    assert GPT_TRAIN.flops_per_step(p) == per_token * 4 * 32 * 2
    assert GPT_TRAIN.peak_precision(tiny(precision="amp_bf16")) == "bf16"


def test_token_batches_are_next_token_pairs_from_the_seed():
    p = tiny()
    ids, targets = synthetic_batch(p, 7)
    assert ids.shape == targets.shape == (4, 32) and ids.dtype == targets.dtype == np.int64
    assert np.array_equal(ids[:, 1:], targets[:, :-1])  # the targets are the inputs shifted by one
    assert ids.min() >= 0 and ids.max() < 128
    assert np.array_equal(synthetic_batch(p, 7)[0], ids) and not np.array_equal(synthetic_batch(p, 8)[0], ids)
    assert not np.array_equal(synthetic_batch(p, 7, rank=1)[0], ids)


# --- the same function on every framework ------------------------------------------------------------------------


def _torch(p, w, ids, targets):
    torch = pytest.importorskip("torch")
    from backends.torch.gpt import PART, load
    from backends.torch.optimizer import adamw
    from harness.workloads.training import BuildContext

    model = PART.build(p, BuildContext(seed=0, framework=torch))
    load(model, w)
    optimizer, _ = adamw(GPT_TRAIN.training.optimizer(p), model, torch.device("cpu"), capturable=False)
    x, y = torch.from_numpy(ids), torch.from_numpy(targets)

    def loss():
        return torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())

    first = loss()
    first.backward()
    optimizer.step()
    with torch.no_grad():
        return float(first), float(loss()), sum(t.numel() for t in model.parameters())


def _tensorflow(p, w, ids, targets):
    tf = pytest.importorskip("tensorflow")
    from backends.tensorflow import compat
    from backends.tensorflow.gpt import PART, load
    from backends.tensorflow.optimizer import keras_optimizer
    from backends.tensorflow.step import cross_entropy
    from harness.workloads.training import BuildContext

    compat.set_global_policy("float32")
    model = PART.build(p, BuildContext(seed=0, framework=compat.keras))
    load(model, w)
    variables = model.trainable_variables
    optimizer, _ = keras_optimizer(GPT_TRAIN.training.optimizer(p), variables)
    x, y = tf.constant(ids), tf.constant(targets)
    with tf.GradientTape() as tape:
        first = cross_entropy(model(x, training=True), y)
    optimizer.apply_gradients(zip(tape.gradient(first, variables), variables))
    return float(first), float(cross_entropy(model(x), y)), int(sum(np.prod(v.shape) for v in variables))


def _jax(p, w, ids, targets):
    if str(PLUGIN) not in sys.path:
        sys.path.append(str(PLUGIN))
    jax = pytest.importorskip("jax")
    pytest.importorskip("flax")
    import optax
    from harness_jax.gpt import PART, params_of
    from harness_jax.step import cross_entropy
    from harness_jax.train import build_optimizer, parameter_count

    from harness.workloads.training import BuildContext

    model = PART.build(p, BuildContext(seed=0, framework=None))
    params = params_of(w, p.n_layer)
    # the Flax module's own initialisation has the layout params_of fills
    # jitted: op by op, JAX compiles every primitive on its first use (a minute and a half on 2 busy cores)
    init = jax.jit(model.init)(jax.random.PRNGKey(0), ids[:1].astype(np.int32))["params"]
    assert jax.tree_util.tree_structure(init) == jax.tree_util.tree_structure(params)
    optimizer = build_optimizer(GPT_TRAIN.training.optimizer(p), {})

    def loss(params):
        return cross_entropy(model.apply({"params": params}, ids.astype(np.int32)), targets.astype(np.int32))

    first, grads = jax.jit(jax.value_and_grad(loss))(params)
    updates, _ = optimizer.update(grads, optimizer.init(params), params)
    return float(first), float(jax.jit(loss)(optax.apply_updates(params, updates))), parameter_count(init)


RUNNERS = {"torch": _torch, "tensorflow": _tensorflow, "jax": _jax}


@functools.cache
def losses(framework: str, attention: str) -> tuple[float, float, int]:
    """(loss before, loss after one AdamW step, parameters) of the framework's part on the tiny model."""
    p = tiny(attention=attention)
    ids, targets = synthetic_batch(p, 0)
    return RUNNERS[framework](p, weights(p, 0), ids, targets)


@pytest.mark.parametrize("attention", ["fused", "math"])
@pytest.mark.parametrize("first,second", PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_each_pair_of_frameworks_computes_the_same_loss_before_and_after_one_adamw_step(first, second, attention):
    a, b = losses(first, attention), losses(second, attention)
    assert a[2] == b[2] == parameter_count(tiny())
    assert a[0] == pytest.approx(b[0], rel=1e-4)
    assert a[1] == pytest.approx(b[1], rel=1e-3)
    # the step moved the loss by more than the tolerance, so the second check tests the optimizer
    assert abs(a[1] - a[0]) > 1e-3 * a[0]
    # random weights on a 128-token vocabulary: about ln(128)
    assert a[0] == pytest.approx(np.log(128), rel=0.05)


# --- through each backend's trainer --------------------------------------------------------------------------------

ONE_BLOCK = {"warmup": 0, "steps": 1, "repeats": 1}  # the first step and one timed step


def trained(backend: str, **params) -> dict:
    """One tiny gpt_train run through the backend's trainer in this process, as a worker runs it."""
    from tests.specs import backend_spec, run_backend

    if backend == "torch":
        torch = pytest.importorskip("torch")
        torch.set_num_threads(1)
        from backends.torch import TorchBackend as Backend
    elif backend == "tensorflow":
        pytest.importorskip("tensorflow")
        from backends.tensorflow import TensorFlowBackend as Backend
    else:
        if str(PLUGIN) not in sys.path:
            sys.path.append(str(PLUGIN))
        pytest.importorskip("jax")
        pytest.importorskip("flax")
        from harness_jax import JaxBackend as Backend
    result = run_backend(Backend(), backend_spec(backend, "gpt_train", {**TINY, **params}, ONE_BLOCK))
    assert result.get("status", "ok") == "ok", result.get("error")
    return result


def assert_trained_the_workload(result: dict, grad_accum: int = 1) -> None:
    p = tiny()
    from harness.workloads.base import fingerprint

    checks = result["checks"]
    assert checks["inputs_fingerprint"] == fingerprint(*synthetic_batch(p, 0))  # the same tokens on every side
    assert checks["model_parameters"] == parameter_count(p)
    # about ln(128) from random weights (less under Keras's fit, whose first call trains fit_steps steps)
    assert 0 < checks["loss_last"] < checks["loss_first"] < np.log(128) * 1.05
    assert result["timing"]["items_per_step"] == 4 * 32 * grad_accum  # tokens, as the headline counts them
    assert "GPT-2-style decoder (custom sizes" in result["api"]["model"]


@pytest.mark.parametrize("backend", FRAMEWORKS)
def test_each_trainer_trains_gpt_with_recomputed_blocks_and_accumulation_on_the_explicit_path(backend):
    # JAX's eager mode dispatches every primitive of the recomputed blocks one by one (a minute on 2 cores): jit
    result = trained(backend, execution="compiled" if backend == "jax" else "eager", recompute="blocks",
                     grad_accum=2, attention="math")
    assert_trained_the_workload(result, grad_accum=2)
    assert result["api"]["attention"].startswith("explicit softmax")
    assert "2 " in result["api"]["recompute"] and "Block" in result["api"]["recompute"]


@pytest.mark.parametrize("backend", FRAMEWORKS)
def test_each_framework_default_path_runs_its_own_fused_attention(backend):
    result = trained(backend, execution="default")
    assert_trained_the_workload(result)
    keras3 = "(Keras 3)" in result["api"].get("keras", "")
    fused = {"torch": "scaled_dot_product_attention(is_causal=True)", "jax": "jax.nn.dot_product_attention",
             "tensorflow": "keras.ops.dot_product_attention" if keras3 else "unfused (Keras 2 has no fused attention)"}
    assert fused[backend] in result["api"]["attention"]
    # where the framework does not say which kernel ran, the record says where to look
    assert ("not reported; see the profile's attention class" in result["api"]["attention"]) == (
        backend != "tensorflow" or keras3)


def test_the_transformer_scenario_is_gpt2_small_in_amp_bf16_at_1024_tokens_in_every_mode_and_keras():
    from harness.scenario.bundled import bundled_scenarios
    from harness.scenario.load import load_scenarios
    from harness.session.plan import build_plan

    path = next(p for p in bundled_scenarios() if p.stem == "transformer")
    (scenario,) = load_scenarios(path)
    runs = build_plan(scenario, "s")
    assert {s.workload for s in runs} == {"gpt_train"}
    assert {(s.params["n_layer"], s.params["d_model"], s.params["seq_len"], s.params["precision"],
             s.params["attention"]) for s in runs} == {(12, 768, 1024, "amp_bf16", "fused")}
    assert {s.params["execution"] for s in runs} == {"default", "eager", "graph", "cuda_graph", "compiled"}
    assert {(s.options or {}).get("keras") for s in runs if s.backend == "tensorflow"} == {"keras3", "tf_keras"}
    assert {s.measure.processes for s in runs} == {"auto"}


REFERENCE_LOOPS = {"torch": PLUGIN.parent.parent / "benchmarks" / "gpt_torch.py",
                   "tensorflow": PLUGIN.parent.parent / "benchmarks" / "gpt_tensorflow.py",
                   "jax": PLUGIN / "benchmarks" / "gpt_jax.py"}


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_each_hand_written_reference_loop_trains_the_tiny_model_and_prints_tokens_per_second(framework, capsys):
    import importlib.util
    import json

    pytest.importorskip({"torch": "torch", "tensorflow": "tensorflow", "jax": "flax"}[framework])
    if str(REFERENCE_LOOPS["torch"].parent) not in sys.path:
        sys.path.append(str(REFERENCE_LOOPS["torch"].parent))
    spec = importlib.util.spec_from_file_location(f"gpt_{framework}_loop", REFERENCE_LOOPS[framework])
    loop = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loop)
    loop.main(["--device", "cpu", "--n-layer", "2", "--n-head", "4", "--d-model", "64", "--seq-len", "32",
               "--vocab-size", "128", "--batch-size", "4", "--precision", "fp32", "--steps", "2", "--warmup", "1",
               "--repeats", "2"])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["tokens_per_s"] > 0 and len(report["samples"]) == 2
    assert 0 < report["loss_last"] < np.log(128) * 1.05


def test_a_keras_3_without_dot_product_attention_refuses_fused_and_keras_2_runs_the_explicit_path():
    from types import SimpleNamespace

    pytest.importorskip("tensorflow")
    from backends.tensorflow.gpt import (
        FUSED_KERAS2_API,
        attention_api,
        fused_unsupported_reason,
    )

    old_keras3 = SimpleNamespace(__version__="3.3.3", ops=SimpleNamespace())
    keras2 = SimpleNamespace(__version__="2.12.0")
    current = SimpleNamespace(ops=SimpleNamespace(dot_product_attention=None))
    assert "no keras.ops.dot_product_attention" in fused_unsupported_reason(old_keras3, "fused")
    assert fused_unsupported_reason(old_keras3, "math") is None
    assert fused_unsupported_reason(keras2, "fused") is None and attention_api(keras2, "fused") == FUSED_KERAS2_API
    assert fused_unsupported_reason(current, "fused") is None
    assert attention_api(current, "fused").startswith("keras.ops.dot_product_attention")
