"""GPU telemetry over the timed region, from NVML: power, energy, SM clock, temperature, memory.

A background thread samples every `interval_s` while the timed blocks run; it sleeps between
samples and never touches the framework, so the measurement is not disturbed. Energy comes from
the driver's energy counter (Volta and newer) read at start and stop, else from the mean power.
"""

from __future__ import annotations

import threading
import time

from harness.machine.devices import gpu_index
from harness.machine.nvml import nvml, nvml_index

#: Shortest timed region for which power and energy are reported. NVML's power reading is an
#: average over about a second and the energy counter advances in coarse steps, so over a few
#: milliseconds they read 0 W or thousands of watts: such a figure is null, not a guess.
MIN_ENERGY_SECONDS = 1.0


class NullSampler:
    """Telemetry for a device NVML does not know (the CPU, or no NVML): every figure is None."""

    def start(self) -> None:
        """Nothing to sample."""

    def stop(self) -> None:
        """Nothing to stop."""

    def figures(self) -> dict:
        """No figures: {}."""
        return {}


class NvmlSampler:
    """Samples one GPU through NVML during the timed region."""

    def __init__(self, index: int, interval_s: float = 0.05):
        self._lib = nvml()
        self._handle = self._lib.nvmlDeviceGetHandleByIndex(index)
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._samples: list[tuple[float | None, float | None, float | None, int | None]] = []
        self._energy0 = None
        self._energy1 = None
        self._t0 = self._t1 = None
        self._max_clock = None

    def _read(self, fn, *args):
        try:
            return getattr(self._lib, fn)(self._handle, *args)
        except Exception:
            return None

    def _sample(self) -> None:
        power = self._read("nvmlDeviceGetPowerUsage")  # mW
        clock = self._read("nvmlDeviceGetClockInfo", self._lib.NVML_CLOCK_SM)  # MHz
        temp = self._read("nvmlDeviceGetTemperature", self._lib.NVML_TEMPERATURE_GPU)
        mem = self._read("nvmlDeviceGetMemoryInfo")
        self._samples.append(
            (power / 1000.0 if power is not None else None, clock, temp, int(mem.used) if mem is not None else None)
        )

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def start(self) -> None:
        """Read the energy counter and start the sampling thread (as the timed region begins)."""
        self._max_clock = self._read("nvmlDeviceGetMaxClockInfo", self._lib.NVML_CLOCK_SM)
        self._energy0 = self._read("nvmlDeviceGetTotalEnergyConsumption")  # mJ since driver load
        self._t0 = time.perf_counter()
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="harness-nvml", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Read the energy counter again and stop the sampling thread (as the timed region ends)."""
        self._t1 = time.perf_counter()
        self._energy1 = self._read("nvmlDeviceGetTotalEnergyConsumption")
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self._sample()

    def figures(self) -> dict:
        """avg_power_w, energy_j, sm_clock_{min,mean}_mhz, temperature_max_c, device_used_bytes."""
        if not self._samples or self._t0 is None or self._t1 is None:
            return {}

        def values(i):
            return [s[i] for s in self._samples if s[i] is not None]

        power, clock, temp, used = values(0), values(1), values(2), values(3)
        seconds = self._t1 - self._t0
        energy = None
        if self._energy0 is not None and self._energy1 is not None and self._energy1 >= self._energy0:
            energy = (self._energy1 - self._energy0) / 1000.0
        avg_power = energy / seconds if energy is not None and seconds > 0 else (sum(power) / len(power) if power else None)
        if energy is None and avg_power is not None:
            energy = avg_power * seconds
        note = None
        if seconds < MIN_ENERGY_SECONDS:
            energy = avg_power = None
            note = f"timed region {seconds:.3g} s is shorter than {MIN_ENERGY_SECONDS:g} s: too short for NVML power and energy"
        return {
            "note": note,
            "avg_power_w": avg_power,
            "energy_j": energy,
            "sm_clock_min_mhz": min(clock) if clock else None,
            "sm_clock_mean_mhz": sum(clock) / len(clock) if clock else None,
            "sm_clock_max_mhz": self._max_clock,
            "temperature_max_c": max(temp) if temp else None,
            "device_used_bytes": max(used) if used else None,
            "telemetry_samples": len(self._samples),
            "timed_seconds": seconds,
        }


#: What sampler_for hands out: both have start, stop and figures.
Sampler = NullSampler | NvmlSampler


def sampler_for(device: str) -> Sampler:
    """An NvmlSampler for a neutral `cuda:N` device where NVML answers, else a NullSampler."""
    index = gpu_index(device)
    if index is None or nvml() is None:
        return NullSampler()
    try:
        return NvmlSampler(nvml_index(index))
    except Exception:
        return NullSampler()
