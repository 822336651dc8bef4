"""resnet50_train through the JAX trainer, in-process on the CPU with tiny sizes (32x32 images, batch 2, 10
classes, 1-2 steps).

Each run goes through harness.worker.execute.measure_run, as a worker runs it. XLA's compile of the whole
ResNet-50 step dominates (about 6-15 s on 2 cores); the step's loss-scaling, accumulation and donation logic
(harness_jax.step) is also tested on a tiny Flax model, which compiles in a moment.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("flax")

from helpers import ONE_BLOCK, TINY_RESNET, train  # noqa: E402

from harness.errors import Unsupported  # noqa: E402
from harness.seam.backend import RunContext  # noqa: E402
from harness.workloads.base import fingerprint  # noqa: E402
from harness.workloads.resnet50_train import (  # noqa: E402
    ResNet50Params,
    parameter_count,
    synthetic_batch,
)
from harness_jax import EAGER_TRAINING  # noqa: E402
from harness_jax import precision as jax_precision  # noqa: E402
from harness_jax import step as jax_step  # noqa: E402


@pytest.fixture(scope="module")
def compiled_run() -> dict:
    """One compiled fp32 channels_last run of two timed blocks, shared by the tests that only read it."""
    ctx = RunContext()
    result = train(ctx=ctx, execution="compiled", memory_format="channels_last", image_size=64)
    result["_warnings"] = ctx.warnings
    return result


# --- the step's logic on a tiny model ---------------------------------------------------------


class TinyModel:
    """A Dense - BatchNorm - Dense network with the ResNet's apply() contract (params + batch_stats)."""

    def __new__(cls):
        import flax.linen as nn

        class Tiny(nn.Module):
            @nn.compact
            def __call__(self, x):
                x = nn.BatchNorm(use_running_average=False, momentum=0.9, epsilon=1e-5)(nn.Dense(4)(x))
                return nn.Dense(3)(nn.relu(x))

        return Tiny()


def tiny_setup(loss_scaling: bool):
    import jax
    import jax.numpy as jnp
    import optax

    model = TinyModel()
    variables = model.init(jax.random.PRNGKey(0), jnp.zeros((4, 5)))
    optimizer = optax.sgd(0.1, momentum=0.9)
    scale = jax_precision.initial_loss_scale() if loss_scaling else None
    state = jax_step.TrainState(variables["params"], {"batch_stats": variables["batch_stats"]},
                                optimizer.init(variables["params"]), scale)
    x = jnp.asarray(np.random.default_rng(0).standard_normal((4, 5)), jnp.float32)
    y = jnp.asarray([0, 1, 2, 0], jnp.int32)
    return model, optimizer, state, x, y


def leaves(tree):
    import jax

    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(tree)]


def test_grad_accum_sums_the_same_gradients_in_a_python_loop_and_in_fori_loop():
    import jax

    model, optimizer, state, x, y = tiny_setup(False)
    one = jax_step.build_train_step(model, jax_step.cross_entropy, optimizer, 1, False, "python")(state, x, y)
    python = jax_step.build_train_step(model, jax_step.cross_entropy, optimizer, 2, False, "python")(state, x, y)
    fori = jax.jit(jax_step.build_train_step(model, jax_step.cross_entropy, optimizer, 2, False, "fori_loop"))(state, x, y)
    # the same micro-batch twice, loss / 2, gradients summed: the update of one micro-batch
    for a, b, c in zip(leaves(one[0].params), leaves(python[0].params), leaves(fori[0].params)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(b, c, rtol=1e-5, atol=1e-7)
    assert float(one[1]) == pytest.approx(float(fori[1]), rel=1e-6)


def test_xla_computes_every_micro_batch_of_the_same_batch_instead_of_merging_them():
    import jax

    model, optimizer, state, x, y = tiny_setup(False)

    def dots(accum: int) -> int:
        step = jax.jit(jax_step.build_train_step(model, jax_step.cross_entropy, optimizer, accum, False, "fori_loop"))
        return step.lower(state, x, y).compile().as_text().count(" dot(")

    # one micro-batch of the Dense-BatchNorm-Dense model: 2 products forward, 3 backward. Without the
    # barrier, XLA merged the second micro-batch into the first (5 products for grad_accum 2 as for 1)
    assert dots(2) >= dots(1) + 3


def test_dynamic_loss_scaling_skips_an_overflowing_update_and_backs_off_then_grows():
    import jax.numpy as jnp

    model, optimizer, state, x, y = tiny_setup(True)
    step = jax_step.build_train_step(model, jax_step.cross_entropy, optimizer, 1, True, "python")
    new, loss = step(state, x, y)
    assert math.isfinite(float(loss))
    assert float(new.loss_scale.scale) == jax_precision.INIT_SCALE and int(new.loss_scale.good_steps) == 1
    assert any(not np.array_equal(a, b) for a, b in zip(leaves(new.params), leaves(state.params)))

    # gradients that are not finite (as an overflow of the scaled loss gives): update skipped, scale halved
    seen = state._replace(loss_scale=jax_precision.LossScale(jnp.float32(1024.0), jnp.int32(5)))
    skipped, _ = step(seen, x * jnp.nan, y)
    assert all(np.array_equal(a, b) for a, b in zip(leaves(skipped.params), leaves(state.params)))
    assert all(np.array_equal(a, b) for a, b in zip(leaves(skipped.opt_state), leaves(state.opt_state)))
    assert float(skipped.loss_scale.scale) == 1024.0 * jax_precision.BACKOFF_FACTOR
    assert int(skipped.loss_scale.good_steps) == 0

    # the GROWTH_INTERVAL-th finite step in a row doubles the scale
    due = state._replace(loss_scale=jax_precision.LossScale(jnp.float32(1024.0), jnp.int32(jax_precision.GROWTH_INTERVAL - 1)))
    grown, _ = step(due, x, y)
    assert float(grown.loss_scale.scale) == 2048.0 and int(grown.loss_scale.good_steps) == 0


def test_the_compiled_step_donates_the_state_it_replaces():
    import jax

    model, optimizer, state, x, y = tiny_setup(False)
    state = jax.device_put(state)
    step = jax.jit(jax_step.build_train_step(model, jax_step.cross_entropy, optimizer, 1, False, "fori_loop"), donate_argnums=(0,))
    old = jax.tree_util.tree_leaves(state.params)[0]
    new, _ = step(state, x, y)
    jax.block_until_ready(new)
    assert old.is_deleted()  # updated in place: the old parameters' buffer went to the new ones


def test_adamw_decays_only_the_matrices_under_decay_matrices():
    import jax.numpy as jnp

    from harness.workloads.training import OptimizerSpec
    from harness_jax.train import build_optimizer

    params = {"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)}
    zero = {"kernel": jnp.zeros((2, 2)), "bias": jnp.zeros(2)}
    for decay, bias_decays in (("matrices", False), ("all", True)):
        api: dict = {}
        optimizer = build_optimizer(OptimizerSpec("adamw", lr=0.1, weight_decay=0.5, decay=decay), api)
        updates, _ = optimizer.update(zero, optimizer.init(params), params)
        # with zero gradients the update is the decoupled decay alone: -lr * weight_decay * weight
        assert np.allclose(updates["kernel"], -0.05)
        assert np.allclose(updates["bias"], -0.05 if bias_decays else 0.0)
        assert api["optimizer"].startswith("optax.adamw(learning_rate=0.1, b1=0.9, b2=0.999, eps=1e-08, "
                                           "weight_decay=0.5")
        assert ("mask=weights of 2+ dimensions" in api["optimizer"]) is not bias_decays


# --- whole runs through the core --------------------------------------------------------------


def test_compiled_training_is_ok_with_torchvisions_count_and_the_neutral_inputs(compiled_run):
    result = compiled_run
    assert result["status"] == "ok", result.get("error")
    checks = result["checks"]
    assert checks["model_parameters"] == parameter_count(10) == 23_528_522
    assert math.isfinite(checks["loss_first"]) and math.isfinite(checks["loss_last"])
    # what reached the device, read back as NCHW float32 and int64 labels, is what every backend gets
    images, labels = synthetic_batch(ResNet50Params(**{**TINY_RESNET, "image_size": 64}), 0)
    assert checks["inputs_fingerprint"] == fingerprint(images, labels)
    assert len(result["samples"]) == 2 and all(s > 0 for s in result["samples"])
    assert result["tflops"] > 0 and result["first_step_s"] > 0
    assert result["timing"]["compilations"] == 1  # first step, warm-up and two blocks: one compile
    assert result["timing"]["images_per_step"] == 2
    api = result["api"]
    assert api["execution"].startswith("jax.jit of the whole step") and "donate_argnums=0" in api["execution"]
    assert api["precision"] == "float32 throughout; jax.config.update('jax_default_matmul_precision', 'highest')"
    assert api["memory_format"].startswith("NHWC activations: the model part builds for BuildContext.layout="
                                          "'channels_last', the input transposed NCHW -> NHWC on the host")
    assert api["recompute"] == "none" and api["model"].startswith("ResNet-50 v1.5 in flax.linen (torchvision layout")
    assert api["loss"] == "optax.softmax_cross_entropy_with_integer_labels on float32 logits, mean"
    assert api["optimizer"].startswith("optax.sgd(learning_rate=0.01, momentum=0.9)")
    assert api["sync"].startswith("jax.block_until_ready")
    assert EAGER_TRAINING not in result["_warnings"]
    assert result["peak_allocated_bytes"] is None  # the CPU client keeps no allocator statistics


def test_default_is_the_jitted_step_and_says_so():
    result = train(execution="default", memory_format="channels_last", measure=ONE_BLOCK)
    assert result["status"] == "ok", result.get("error")
    assert result["api"]["execution"].startswith("default -> compiled: jax.jit of the whole step")
    assert result["timing"]["compilations"] == 1 and "steps_per_call" not in result["timing"]


def test_channels_first_recompute_and_grad_accum_train_the_same_network(compiled_run):
    # three techniques in one compile (each compile of the step costs seconds on 2 cores): none changes
    # the first loss, which the same weights compute on the same images before any update. 64x64, not
    # 32x32: at 32x32 the last stage is 1x1, so its BatchNorm normalizes 2 values per channel, and Flax's
    # one-pass variance (E[x^2] - E[x]^2) makes the loss move by percents with any change of rounding
    result = train(execution="compiled", memory_format="channels_first", recompute="blocks", grad_accum=2,
                   image_size=64)
    assert result["status"] == "ok", result.get("error")
    assert result["checks"]["loss_first"] == pytest.approx(compiled_run["checks"]["loss_first"], rel=1e-4)
    assert result["checks"]["inputs_fingerprint"] == compiled_run["checks"]["inputs_fingerprint"]
    api = result["api"]
    assert api["memory_format"].startswith("NCHW activations: the model part builds for BuildContext.layout="
                                          "'channels_first'; XLA's layout")
    assert api["recompute"] == "flax.linen.remat (jax.checkpoint) around each of the 16 Bottleneck blocks"
    assert api["grad_accum"].startswith("2 micro-batches of 2") and "jax.lax.fori_loop" in api["grad_accum"]
    assert result["timing"]["images_per_step"] == 4
    for rate, wall in zip(result["samples"], result["timing"]["block_wall_s"]):
        assert rate == pytest.approx(4 * result["timing"]["steps_per_block"] / wall)


def test_eager_training_runs_op_by_op_and_says_it_is_a_debugging_mode():
    ctx = RunContext()
    result = train(ctx=ctx, execution="eager", measure=ONE_BLOCK)
    assert result["status"] == "ok", result.get("error")
    assert math.isfinite(result["checks"]["loss_last"])
    assert result["api"]["execution"].startswith("eager: the same step function without jax.jit")
    assert "compilations" not in result["timing"]
    assert EAGER_TRAINING in ctx.warnings


def test_amp_bf16_computes_in_bfloat16_with_float32_parameters_and_logits():
    result = train(execution="compiled", precision="amp_bf16", measure=ONE_BLOCK)
    assert result["status"] == "ok", result.get("error")
    assert result["api"]["precision"].startswith("Flax modules with dtype=bfloat16, param_dtype=float32")
    assert math.isfinite(result["checks"]["loss_first"])
    assert result["checks"]["model_parameters"] == parameter_count(10)


def test_amp_fp16_trains_with_dynamic_loss_scaling():
    result = train(execution="compiled", precision="amp_fp16", measure=ONE_BLOCK)
    assert result["status"] == "ok", result.get("error")
    assert "dtype=float16" in result["api"]["precision"] and "dynamic loss scaling" in result["api"]["precision"]
    assert math.isfinite(result["checks"]["loss_last"])
    # two steps: the scale starts at 2**16 and can only have backed off (halved) since
    scale = result["timing"]["loss_scale"]
    assert scale in (jax_precision.INIT_SCALE, jax_precision.INIT_SCALE / 2, jax_precision.INIT_SCALE / 4)


def test_tf32_training_on_the_cpu_is_unsupported_with_a_reason():
    with pytest.raises(Unsupported, match="TF32"):
        train(precision="tf32")
