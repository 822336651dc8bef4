"""A framework build that cannot run on the GPU it is given is `unsupported` at once, with the reason: each
backend compares what its framework reports of its own build with the GPU's compute capability, first thing
after the framework's import. Tested on the CPU with the reported values faked."""

import re

import pytest

from harness.errors import Unsupported
from harness.seam.cudabuild import check_cuda_build, parse_arch
from harness.seam.runspec import RunSpec
from harness.worker.execute import execute
from harness.workloads import get_workload
from tests.conftest import RELIABILITY

#: torch.cuda.get_arch_list() of PyPI's torch 2.0.1 (CUDA 11.7)
TORCH_201 = ["sm_37", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86"]
#: tf.sysconfig.get_build_info()["cuda_compute_capabilities"] of TensorFlow 2.21
TF_221 = ["sm_60", "sm_70", "sm_80", "sm_89", "compute_90"]
H200 = (9, 0)


def test_parse_arch_reads_machine_code_ptx_and_versions():
    assert parse_arch("sm_86") == ("sm", 8, 6, False)
    assert parse_arch("compute_90") == ("compute", 9, 0, False)
    assert parse_arch("sm_90a") == ("sm", 9, 0, True)
    assert parse_arch("sm_100") == ("sm", 10, 0, False)
    assert parse_arch("7.5") == ("sm", 7, 5, False)
    assert parse_arch("gfx90a") is None


def test_a_build_without_kernels_for_the_gpu_is_unsupported():
    with pytest.raises(Unsupported) as info:
        check_cuda_build("torch 2.0.1", TORCH_201, H200, "cuda:0 (NVIDIA H200)")
    text = str(info.value)
    assert "torch 2.0.1 cannot run on cuda:0 (NVIDIA H200)" in text and "compute capability 9.0" in text
    assert "sm_37, sm_50" in text and "sm_86" in text
    with pytest.raises(Unsupported):  # arch-specific code runs on its own version only
        check_cuda_build("x", ["sm_90a"], (10, 0), "gpu")
    RELIABILITY["framework builds that cannot run on the GPU: unsupported"] += 1


@pytest.mark.parametrize("archs, capability", [(TORCH_201, (8, 6)), (TORCH_201, (8, 9)), (TORCH_201, (7, 0)),
                                               (["sm_90a"], H200), (TF_221, (8, 9)), ([], H200), (["gfx90a"], H200)])
def test_a_build_with_machine_code_for_the_gpu_runs_without_a_word(archs, capability):
    assert check_cuda_build("build", archs, capability, "gpu") == []


def test_a_build_that_only_has_ptx_for_the_gpu_warns_the_first_run_is_slow():
    (warning,) = check_cuda_build("TensorFlow 2.21.0", TF_221, H200, "cuda:0 (NVIDIA H200)")
    assert "compiles its kernels from PTX (compute_90)" in warning and "first steps include compiling" in warning
    with pytest.raises(Unsupported):  # PTX for a newer GPU cannot be compiled for an older one
        check_cuda_build("x", ["compute_90"], (8, 6), "gpu")


def test_the_worker_ends_a_run_whose_build_cannot_run_at_once(fake_backend, monkeypatch, tmp_path):
    from tests.fake_backend import FakeDevice

    def check_build(self):
        return check_cuda_build("fake 1.0", TORCH_201, H200, "cuda:0 (NVIDIA H200)")

    monkeypatch.setattr(FakeDevice, "check_build", check_build, raising=False)
    marker = tmp_path / "prepared"
    spec = RunSpec(run_id="r1", session_id="s1", run_key="k1", scenario="t", workload="gemm", backend="fake",
                   device="cpu", params=get_workload("gemm").validate({"size": 8}).model_dump(),
                   measure={"warmup": 0, "steps": 2, "repeats": 3}, seed=0,
                   options={"action": "ok", "marker": str(marker)})
    result = execute(spec)
    assert result.status == "unsupported" and "fake 1.0 cannot run on cuda:0 (NVIDIA H200)" in result.error
    assert not marker.exists()  # nothing was prepared, no kernel ran
    assert result.identity["device_name"] == "fake cpu"  # the record still says what the device was
    RELIABILITY["framework builds that cannot run on the GPU: unsupported"] += 1


def test_the_torch_device_compares_its_arch_list_with_the_gpu(monkeypatch):
    torch = pytest.importorskip("torch")
    from backends.torch import device as torch_device

    monkeypatch.setattr(torch_device.TorchDevice, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(torch_device, "compute_capability", lambda device: H200)
    monkeypatch.setattr(torch_device, "device_name", lambda device: "NVIDIA H200")
    device = torch_device.TorchDevice("cpu", {})
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: list(TORCH_201))
    with pytest.raises(Unsupported, match=re.escape(f"torch {torch.__version__} cannot run on cpu (NVIDIA H200)")):
        device.check_build()
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: TORCH_201 + ["sm_90"])
    assert device.check_build() == []


def test_the_tensorflow_device_compares_its_build_info_with_the_gpu(monkeypatch):
    import tensorflow as tf

    from backends.tensorflow import device as tf_device

    device = tf_device.TensorFlowDevice("cpu", {})
    device.placement, device.neutral = tf_device.Placement("cuda:0", "/GPU:0"), "cuda:0"
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: ["gpu0"])
    monkeypatch.setattr(tf.config.experimental, "get_device_details",
                        lambda gpu: {"compute_capability": H200, "device_name": "NVIDIA H200"})
    monkeypatch.setattr(tf.sysconfig, "get_build_info", lambda: {"cuda_compute_capabilities": TF_221})
    (warning,) = device.check_build()
    assert f"TensorFlow {tf.__version__} has no machine code for cuda:0 (NVIDIA H200)" in warning
    monkeypatch.setattr(tf.sysconfig, "get_build_info",
                        lambda: {"cuda_compute_capabilities": ["sm_35", "sm_50", "sm_60", "sm_70", "sm_75"]})
    with pytest.raises(Unsupported, match="cannot run on cuda:0 \\(NVIDIA H200\\)"):
        device.check_build()


def test_the_jax_device_refuses_a_gpu_below_jaxlibs_lowest_capability(monkeypatch):
    pytest.importorskip("jax", reason="JAX is installed in the current era only")
    # the plugin is installed in the current era; elsewhere importable only once test_profile put it on the path
    try:
        from harness_jax import device as jax_device
    except ImportError:  # not on the path, or a JAX older than the plugin needs (TensorFlow 2.12 brings jax 0.4)
        pytest.skip("the harness-jax plugin is not importable with this JAX")

    device = jax_device.JaxDevice("cpu", {})
    monkeypatch.setattr(jax_device.JaxDevice, "is_gpu", property(lambda self: True))
    monkeypatch.setattr(jax_device, "device_name", lambda d: "Tesla K80")
    monkeypatch.setattr(jax_device, "compute_capability", lambda d: (3, 7))
    with pytest.raises(Unsupported, match="compute capability 3.7, and jaxlib's CUDA support starts at 5.2"):
        device.check_build()
    monkeypatch.setattr(jax_device, "compute_capability", lambda d: H200)
    assert device.check_build() == []
