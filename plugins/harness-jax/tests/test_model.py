"""The Flax ResNet-50 v1.5: torchvision's parameter count, and torchvision's logits from torchvision's weights."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("flax")

from conftest import PLUGIN, ROOT  # noqa: E402

from harness.workloads.resnet50_train import parameter_count  # noqa: E402


def build(num_classes: int, layout: str, recompute: bool = False):
    """The backend's ResNet-50 part built as the trainer builds it: (module, BuildContext)."""
    import flax.linen as nn

    from harness.workloads.resnet50_train import ResNet50Params
    from harness.workloads.training import BuildContext
    from harness_jax.resnet50 import PART

    ctx = BuildContext(seed=0, framework=nn, layout="channels_last" if layout == "NHWC" else "channels_first",
                       recompute=nn.remat if recompute else (lambda block: block))
    return PART.build(ResNet50Params(num_classes=num_classes), ctx), ctx


def shapes(net, layout: str, image_size: int = 32):
    """(params, batch_stats) of the module as the trainer initialises it, shapes only (jax.eval_shape)."""
    import jax
    import jax.numpy as jnp

    from harness_jax.train import init_variables

    shape = (1, image_size, image_size, 3) if layout == "NHWC" else (1, 3, image_size, image_size)
    params, state = jax.eval_shape(lambda: init_variables(net, jax.ShapeDtypeStruct(shape, jnp.float32), 0))
    return params, state["batch_stats"]


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("num_classes", [1000, 10])
def test_the_flax_build_has_torchvisions_trainable_parameter_count(layout, num_classes):
    from harness_jax.resnet50 import block_count
    from harness_jax.train import parameter_count as count

    net, ctx = build(num_classes, layout)
    params, stats = shapes(net, layout)  # nothing is computed
    assert count(params) == parameter_count(num_classes)
    if num_classes == 1000:
        assert count(params) == 25_557_032
    # BatchNorm's running statistics are state, not trainable: 53,120 of them, as torchvision's buffers
    assert count(stats) == 53_120
    assert sum(1 for name in params if name.startswith("layer")) == block_count() == ctx.blocks == 16


def test_recompute_blocks_puts_each_bottleneck_under_jax_checkpoint():
    import jax
    import jax.numpy as jnp
    import optax

    def checkpoints(recompute: bool) -> int:
        net, _ = build(10, "NHWC", recompute)
        params, stats = shapes(net, "NHWC")
        images = jnp.zeros((2, 32, 32, 3))

        def loss(p, s):
            logits, _ = net.apply({"params": p, "batch_stats": s}, images, mutable=["batch_stats"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, jnp.zeros(2, jnp.int32)).mean()

        jaxpr = jax.make_jaxpr(jax.grad(loss))(params, stats)  # traced from shapes, not run
        # jax.checkpoint's primitive (named remat2 in jax 0.4-0.10; checkpoint in some releases)
        return sum(1 for eqn in jaxpr.eqns if eqn.primitive.name in ("remat2", "remat", "checkpoint"))

    assert checkpoints(False) == 0
    assert checkpoints(True) == 16  # one per bottleneck block, recomputed in the backward pass


def max_logit_difference_from_torchvision(layout: str, image_size: int = 64) -> float:
    """Copy a torchvision resnet50's weights (BatchNorm statistics randomized) into the Flax build and return
    the largest relative difference of their inference logits. Import torch before calling this."""
    import torch
    import torchvision

    torch.manual_seed(0)
    reference = torchvision.models.resnet50().eval()
    with torch.no_grad():
        for module in reference.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 1.5)
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.1, 0.1)
    weights = {k: v.numpy() for k, v in reference.state_dict().items()}
    images = np.random.default_rng(0).standard_normal((2, 3, image_size, image_size)).astype(np.float32)
    with torch.no_grad():
        expected = reference(torch.from_numpy(images)).numpy()

    import jax

    from harness_jax.resnet50 import from_torchvision

    jax.config.update("jax_default_matmul_precision", "highest")  # as the backend sets it for fp32
    params, stats = from_torchvision(weights)
    net = build(1000, layout)[0].clone(train=False)
    # the copied tree has exactly the structure the model builds
    built = shapes(net, layout, image_size)
    assert jax.tree_util.tree_structure(built[0]) == jax.tree_util.tree_structure(params)
    assert jax.tree_util.tree_structure(built[1]) == jax.tree_util.tree_structure(stats)
    x = images if layout == "NCHW" else images.transpose(0, 2, 3, 1)
    got = np.asarray(jax.jit(net.apply)({"params": params, "batch_stats": stats}, x))
    return float(np.abs(got - expected).max() / np.abs(expected).max())


def test_the_flax_build_computes_torchvisions_logits_with_torchvisions_weights():
    if importlib.util.find_spec("torchvision") is None:
        pytest.skip("torchvision is not installed")
    # torch imported first, in its own process (the repository's tests/conftest.py says why)
    code = (
        "import torch, torchvision, json; from test_model import max_logit_difference_from_torchvision as d; "
        "print(json.dumps([d('NHWC'), d('NCHW')]))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PLUGIN / "tests"), str(ROOT), str(PLUGIN)])}
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT,
                         env=env, timeout=600).stdout
    differences = json.loads(out.strip().splitlines()[-1])
    assert max(differences) < 1e-5, differences
