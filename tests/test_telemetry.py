"""GPU telemetry from NVML (a fake NVML here: this machine has no GPU), throttling and drift warnings."""

import time
from types import SimpleNamespace

import pytest

from harness.machine import nvml as nvml_mod
from harness.machine import telemetry
from harness.machine.peaks import pct_of_peak
from harness.seam.backend import RunContext
from harness.timing import stats
from harness.worker.figures import summarize, telemetry_fields


class FakeNvml:
    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, clocks=(1980,), power_mw=300_000):
        self.t0 = time.perf_counter()
        self.clocks = list(clocks)
        self.power_mw = power_mw

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetPowerUsage(self, h):
        return self.power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, h):  # mJ, as if drawing power_mw all along
        return int((time.perf_counter() - self.t0) * self.power_mw)

    def nvmlDeviceGetClockInfo(self, h, kind):
        return self.clocks.pop(0) if len(self.clocks) > 1 else self.clocks[0]

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return 1980

    def nvmlDeviceGetTemperature(self, h, kind):
        return 55

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=3 * 2**30, total=80 * 2**30)


@pytest.fixture
def fake_nvml(monkeypatch):
    lib = FakeNvml()
    monkeypatch.setitem(nvml_mod._state, "ok", lib)
    return lib


def test_power_energy_clock_and_memory_are_sampled_over_the_timed_region(fake_nvml):
    sampler = telemetry.sampler_for("cuda:0")
    assert isinstance(sampler, telemetry.NvmlSampler)
    sampler.start()
    time.sleep(1.2)
    sampler.stop()
    figures = sampler.figures()
    assert figures["avg_power_w"] == pytest.approx(300, rel=0.05)
    assert figures["energy_j"] == pytest.approx(300 * figures["timed_seconds"], rel=0.05)
    assert figures["sm_clock_min_mhz"] == 1980 and figures["temperature_max_c"] == 55
    assert figures["device_used_bytes"] == 3 * 2**30
    assert figures["telemetry_samples"] >= 10  # sampled every 50 ms, not once


def test_energy_of_a_region_too_short_for_nvml_is_null_with_a_reason(fake_nvml):
    sampler = telemetry.sampler_for("cuda:0")
    sampler.start()
    sampler.stop()
    figures = sampler.figures()
    assert figures["energy_j"] is None and figures["avg_power_w"] is None
    assert "too short" in figures["note"]


def test_no_nvml_or_a_cpu_gives_no_figures_and_no_error(monkeypatch):
    assert telemetry.sampler_for("cpu").figures() == {}
    monkeypatch.setitem(nvml_mod._state, "ok", False)
    assert isinstance(telemetry.sampler_for("cuda:0"), telemetry.NullSampler)


def test_cuda_visible_devices_maps_cuda_indices_to_nvml_indices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert nvml_mod.nvml_index(0) == 3 and nvml_mod.nvml_index(1) == 1
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert nvml_mod.nvml_index(2) == 2


def test_a_falling_rate_across_blocks_is_reported_as_throttling():
    assert stats.drift([784.6, 713.2, 684.5, 671.5, 676.6]) == pytest.approx(-0.1377, abs=1e-3)
    warnings: list[str] = []
    summarize([784.6, 713.2, 684.5, 671.5, 676.6], warnings)
    assert any("fell 14%" in w for w in warnings)
    steady_warnings: list[str] = []
    steady = summarize([751.0, 752.0, 750.5, 751.7], steady_warnings)
    assert not any("fell" in w for w in steady_warnings)
    assert pct_of_peak(steady.median, "NVIDIA H200", "bf16") == pytest.approx(100 * 751.35 / 989, rel=1e-3)


def test_a_clock_below_90pct_of_its_maximum_is_reported(fake_nvml):
    fake_nvml.clocks = [1980, 1545, 1700, 1980]
    ctx = RunContext()
    sampler = ctx.telemetry_for("cuda:0")
    sampler.start()
    time.sleep(0.3)
    sampler.stop()
    warnings: list[str] = []
    assert telemetry_fields(ctx, 700.0, warnings).sm_clock_min_mhz == 1545
    assert any("SM clock fell to 1545 MHz" in w for w in warnings)
