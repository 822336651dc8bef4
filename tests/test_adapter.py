"""The seam's Device protocol: every device the backends hand the core answers every question the core asks,
with DeviceDefaults' documented answers where its framework has nothing of its own. No framework is imported."""

from __future__ import annotations

import contextlib
import importlib.util
import inspect

import pytest

from harness.seam.adapter import Device, DeviceDefaults, RunContext, RunInputs

#: Every Device method the core calls (harness.worker.execute), and the attribute it reads.
PROTOCOL = [name for name, member in vars(Device).items() if inspect.isfunction(member) and not name.startswith("_")]


def device_classes() -> list[type]:
    """The device classes of the bundled backends, the JAX plugin and the tests' fake."""
    from backends.tensorflow.device import TensorFlowDevice
    from backends.tensorflow.replicas import (
        TensorFlowMirroredDevice,
        TensorFlowReplicaDevice,
    )
    from backends.torch.device import TorchDevice, TorchReplicaDevice
    from tests.fake_backend import FakeDevice

    found = [TorchDevice, TorchReplicaDevice, TensorFlowDevice, TensorFlowReplicaDevice, TensorFlowMirroredDevice,
             FakeDevice]
    if importlib.util.find_spec("harness_jax") is not None:  # the JAX plugin, installed on its own
        try:
            from harness_jax.device import JaxDevice
        except ImportError:  # a JAX older than the plugin needs (TensorFlow 2.12 brings jax 0.4)
            return found
        found.append(JaxDevice)
    return found


def test_the_protocol_names_every_question_the_core_asks_of_a_device():
    assert set(PROTOCOL) == {"identity", "clock", "scope", "reset_peak", "peak_allocated_bytes", "peak_reserved_bytes",
                             "after_timing", "replica_peaks", "profile", "check_build"}


@pytest.mark.parametrize("cls", device_classes(), ids=lambda cls: cls.__name__)
def test_every_device_answers_the_whole_protocol(cls):
    assert issubclass(cls, DeviceDefaults)
    for name in PROTOCOL:
        assert callable(getattr(cls, name, None)), f"{cls.__name__} lacks {name}"


def test_the_defaults_are_no_scope_no_peak_no_extra_timing_and_no_replica_peaks():
    device = DeviceDefaults()
    assert isinstance(device.scope(), contextlib.nullcontext)
    assert device.reset_peak() is None
    assert device.peak_allocated_bytes() is None and device.peak_reserved_bytes() is None
    assert device.after_timing(lambda: None, None, None, RunContext()) == {}
    assert device.replica_peaks() is None


def test_only_a_process_holding_several_replicas_reports_their_peaks():
    from backends.tensorflow.replicas import TensorFlowMirroredDevice

    holders = [cls for cls in device_classes() if cls.replica_peaks is not DeviceDefaults.replica_peaks]
    assert holders == [TensorFlowMirroredDevice]


def test_run_inputs_default_to_a_plain_run():
    run = RunInputs(seed=1, options={}, ctx=RunContext())
    assert run.replica is None and run.probe is False
