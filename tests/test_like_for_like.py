"""Like for like: no cost one side pays that the other does not (docs/execution.md, "Fairness points").

On the CPU with tiny sizes: `loss_scale: dynamic | static` is validated as a neutral parameter and each trainer's
static scaling is the same arithmetic (the loss times STATIC_LOSS_SCALE, the gradients divided, no finite check);
torch's host batches are copied one step ahead through a Prefetcher whose stream discipline is held with fakes
(CUDA streams are not on the CPU). The TensorFlow model's padding and classifier are held in
tests/test_tf_like_for_like.py; the input pipelines' structured fields, equal on every backend, in
plugins/harness-mlp/tests/test_like_for_like_backends.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from backends.torch.inputs import Prefetcher
from backends.torch.precision import Amp, unscale_gradients
from backends.torch.step import make_train_step
from harness.workloads.resnet50_train import ResNet50Params
from harness.workloads.training import STATIC_LOSS_SCALE, TrainingParams
from tests.specs import backend_spec, run_backend

TINY = {"batch_size": 2, "image_size": 32, "num_classes": 10}
MEASURE = {"warmup": 0, "steps": 2, "repeats": 1}
#: float16 trains at 64 px; at 32 px layer4's 1x1 feature maps overflow float16 gradients at any loss scale
FP16 = {**TINY, "image_size": 64, "precision": "amp_fp16"}


# --- loss_scale: the neutral parameter ----------------------------------------------------------


@pytest.mark.parametrize("model", [TrainingParams, ResNet50Params])
def test_loss_scale_static_is_valid_only_with_amp_fp16(model):
    assert model(precision="amp_fp16", loss_scale="static").loss_scale == "static"
    assert model().loss_scale == "dynamic" and model(precision="amp_bf16").loss_scale == "dynamic"
    with pytest.raises(ValueError) as caught:
        model(precision="amp_bf16", loss_scale="static")
    error = caught.value.errors()[0]
    assert error["loc"] == ("loss_scale",) and "applies only to precision amp_fp16" in error["msg"]


def test_a_scenario_with_static_loss_scale_outside_amp_fp16_exits_2_naming_the_field(tmp_path, write_scenario,
                                                                                      harness_cli):
    scenario = {"name": "ls", "workload": "resnet50_train", "params": {**TINY, "loss_scale": "static"},
                "measure": {"warmup": 0, "steps": 1, "repeats": 1}, "backends": ["torch"], "devices": ["cpu"]}
    code, out, err = harness_cli("run", write_scenario(scenario), "--store", "ls.db")
    assert code == 2 and "params.loss_scale" in err + out and "amp_fp16" in err + out, err + out
    assert "Traceback" not in err + out and not (tmp_path / "ls.db").exists()


def test_loss_scale_dynamic_keeps_the_run_keys_stored_before_the_field():
    from harness.seam.runspec import run_key

    params = ResNet50Params(batch_size=2).model_dump()
    before = {k: v for k, v in params.items() if k != "loss_scale"}
    assert run_key("s", "resnet50_train", "torch", "cpu", params) == run_key("s", "resnet50_train", "torch", "cpu", before)
    static = ResNet50Params(batch_size=2, precision="amp_fp16", loss_scale="static").model_dump()
    dynamic = {**static, "loss_scale": "dynamic"}
    assert run_key("s", "resnet50_train", "torch", "cpu", static) != run_key("s", "resnet50_train", "torch", "cpu", dynamic)


# --- torch: static loss scaling -----------------------------------------------------------------


def _one_step(amp: Amp, gradient_scale: float = 1.0):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    p = TrainingParams(batch_size=5)
    features = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))
    labels = torch.tensor([0, 1, 2, 1, 0])
    make_train_step(p, net, None, optimizer, amp)(features, labels)
    return [t.detach().clone() for t in net.parameters()]


def test_torch_static_loss_scaling_is_the_unscaled_update_with_nothing_read_on_the_host():
    plain = _one_step(Amp())
    static = _one_step(Amp(static_scale=STATIC_LOSS_SCALE))
    for a, b in zip(plain, static):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    # no inf check: a non-finite gradient reaches the weights (what dynamic scaling would have skipped)
    weight = torch.nn.Parameter(torch.ones(2))
    weight.grad = torch.tensor([math.inf, 2.0])
    unscale_gradients([weight], 2.0)
    assert weight.grad.tolist() == [math.inf, 1.0]


def test_torch_amp_fp16_records_its_loss_scaling_dynamic_and_static():
    pytest.importorskip("torchvision")
    from backends.torch import TorchBackend

    if tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) < (2, 3):
        pytest.skip("float16 training on the CPU needs CPU float16 autocast (2.2) and torch.amp.GradScaler (2.3)")
    records = {scaling: run_backend(TorchBackend(), backend_spec(
        "torch", "resnet50_train", {**FP16, "loss_scale": scaling}, MEASURE))
        for scaling in ("dynamic", "static")}
    assert records["static"]["status"] == "ok", records["static"].get("error")
    assert "static loss scaling" in records["static"]["api"]["precision"]
    assert "GradScaler" not in records["static"]["api"]["precision"]
    assert records["static"]["timing"]["loss_scale"] == STATIC_LOSS_SCALE
    assert "GradScaler" in records["dynamic"]["api"]["precision"] and "host" in records["dynamic"]["api"]["precision"]


def test_torch_whole_step_cuda_graph_is_refused_only_with_dynamic_loss_scaling():
    from backends.torch import TorchBackend

    params = ResNet50Params(**TINY, precision="amp_fp16", execution="cuda_graph").model_dump()
    assert "GradScaler" in TorchBackend().unsupported_reason("resnet50_train", params, "cuda:0", {})
    assert TorchBackend().unsupported_reason("resnet50_train", {**params, "loss_scale": "static"}, "cuda:0", {}) is None


# --- torch: the host batches' prefetcher --------------------------------------------------------


class FakeStream:
    """Stands for a CUDA stream: what was waited on, in order."""

    def __init__(self, log: list, name: str):
        self.log, self.name = log, name

    def wait_stream(self, other):
        self.log.append(("wait", self.name, other.name))


class FakeTensor:
    def __init__(self, log: list, value):
        self.log, self.value = log, value

    def record_stream(self, stream):
        self.log.append(("record", self.value, stream.name))


def test_the_prefetcher_copies_each_batch_a_step_ahead_on_the_side_stream_and_hands_it_over_safely():
    log: list = []
    side, compute = FakeStream(log, "side"), FakeStream(log, "compute")
    active: list = []

    class Entered:
        def __init__(self, stream):
            self.stream = stream

        def __enter__(self):
            active.append(self.stream.name)

        def __exit__(self, *exc):
            active.pop()

    def to_device(batch):
        log.append(("copy", batch, active[-1] if active else "compute"))
        return (FakeTensor(log, batch),)

    prefetch = Prefetcher(iter(range(10)), to_device, side, use_stream=Entered, current_stream=lambda: compute)
    assert log == [("copy", 0, "side")]  # the first batch is copied before any step
    log.clear()
    got = prefetch.next()
    assert got[0].value == 0
    # the step's stream waits for the copy, claims the batch's memory, and the next copy is issued on the side
    assert log == [("wait", "compute", "side"), ("record", 0, "compute"), ("copy", 1, "side")]
    assert [prefetch.next()[0].value for _ in range(3)] == [1, 2, 3]


def test_the_prefetcher_without_a_stream_keeps_the_order_on_the_cpu():
    copies: list = []
    prefetch = Prefetcher(iter(range(5)), lambda b: copies.append(b) or (torch.tensor(b),))
    assert [int(prefetch.next()[0]) for _ in range(4)] == [0, 1, 2, 3] and copies == [0, 1, 2, 3, 4]


# --- JAX: static loss scaling -------------------------------------------------------------------


def test_jax_static_loss_scaling_is_the_unscaled_update_without_a_finite_check():
    pytest.importorskip("flax")
    import jax
    import jax.numpy as jnp
    import optax
    from flax import linen as nn
    from harness_jax import step as jax_step

    model = nn.Dense(3)
    x, y = jnp.ones((4, 5)), jnp.array([0, 1, 2, 1])
    params = model.init(jax.random.PRNGKey(0), x)["params"]
    optimizer = optax.sgd(0.1)
    state = jax_step.TrainState(params, {}, optimizer.init(params), None)
    plain, _ = jax_step.build_train_step(model, jax_step.cross_entropy, optimizer, 1, False, "python")(state, x, y)
    static, _ = jax_step.build_train_step(model, jax_step.cross_entropy, optimizer, 1, False, "python",
                                          static_scale=STATIC_LOSS_SCALE)(state, x, y)
    for a, b in zip(jax.tree_util.tree_leaves(plain.params), jax.tree_util.tree_leaves(static.params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    assert static.loss_scale is None  # nothing kept between steps: the scale is a constant
