"""What harness holds beside the training step: the synthetic batch reaches the device once, the host's copy is
dropped once it is there, and the benchmark that sets harness's allocator peak against a hand-written step's runs."""

import gc
import importlib.util
import weakref
from pathlib import Path

import pytest

from harness.seam.adapter import RunContext, RunInputs
from harness.workloads import get_workload
from harness.workloads.resnet50_train import synthetic_batch

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from backends.torch import inputs as torch_inputs  # noqa: E402 - needs torch

ROOT = Path(__file__).resolve().parent.parent


def _params(memory_format: str):
    return get_workload("resnet50_train").validate({"batch_size": 3, "image_size": 32, "num_classes": 10,
                                                    "memory_format": memory_format})


def _drawn() -> tuple[list, object]:
    """Weak references to every host array the draw hands the backend, and the draw (synthetic_batch, recorded)."""
    refs = []

    def recording(*args, **kwargs):
        arrays = synthetic_batch(*args, **kwargs)
        refs.extend(weakref.ref(a) for a in arrays)
        return arrays

    return refs, recording


@pytest.mark.parametrize("memory_format", ["channels_last", "channels_first"])
def test_the_host_batch_is_dropped_once_the_batch_is_on_the_device(memory_format):
    # `meta` stands for a device that is not the host's memory: .to() copies there, as to a GPU
    refs, draw = _drawn()
    run = RunInputs(seed=0, options={}, ctx=RunContext(), probe=True)  # a probe: no read-back for the fingerprint
    images, labels = torch_inputs.device_feed(draw, _params(memory_format), torch.device("meta"), run,
                                              channels_last=memory_format == "channels_last").next()
    gc.collect()
    assert refs and all(ref() is None for ref in refs)  # no host copy outlives the device copy
    wanted = torch.channels_last if memory_format == "channels_last" else torch.contiguous_format
    assert images.device.type == "meta" and images.is_contiguous(memory_format=wanted)
    assert tuple(images.shape) == (3, 3, 32, 32) and tuple(labels.shape) == (3,)


def test_channels_last_reaches_the_device_in_one_copy_with_the_same_fingerprint():
    # on the CPU the drawn array is the batch itself: no second host copy in the other layout
    refs, draw = _drawn()
    run = RunInputs(seed=0, options={}, ctx=RunContext())
    feed = torch_inputs.device_feed(draw, _params("channels_last"), torch.device("cpu"), run, channels_last=True)
    (images, _), fingerprint = feed.next(), feed.fingerprint
    drawn = refs[0]()
    assert drawn is not None and drawn.shape == (3, 32, 32, 3)  # drawn (N, H, W, 3) on the host
    assert images.data_ptr() == drawn.ctypes.data and images.is_contiguous(memory_format=torch.channels_last)
    nchw = torch_inputs.device_feed(draw, _params("channels_first"), torch.device("cpu"), run).fingerprint
    assert fingerprint == nchw  # the same images in either layout


def test_the_memory_benchmark_runs_both_steps(tmp_path):
    spec = importlib.util.spec_from_file_location("memory_vs_hand", ROOT / "benchmarks" / "memory_vs_hand.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    common = ["--device", "cpu", "--batch-size", "2", "--image-size", "32", "--num-classes", "10", "--warmup", "0",
              "--steps", "1", "--precision", "amp_bf16", "--recompute-one", "blocks"]
    hand = bench.main(["--one", "hand", *common])
    ours = bench.main(["--one", "harness", *common])
    # the CPU has no allocator peak to read: every figure is null, and harness's step was the one asked for
    assert set(hand) == {"resident_bytes", "peak_bytes", "steady_peak_bytes", "reserved_peak_bytes"}
    assert set(hand.values()) == {None} and ours["status"] == "ok"
    assert "per Bottleneck" in ours["api"]["recompute"] and "bfloat16" in ours["api"]["precision"]
    from harness.timing.loop import run_timed
    from harness.worker import execute

    assert execute.run_timed is run_timed  # the benchmark's measurement hook is gone again
