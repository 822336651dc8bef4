"""The record's figures of a timed run, computed once for every backend: statistics of the block rates
(with drift and spread warnings), TFLOP/s, % of the GPU's datasheet peak, NVML telemetry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.machine import nvml
from harness.machine.env import FrameworkEnv
from harness.machine.peaks import pct_of_peak, unknown_device_warning
from harness.results.parts import BlockTiming, Checks, Telemetry
from harness.seam.backend import RunContext
from harness.timing import stats
from harness.timing.loop import Timing
from harness.worker.outcome import Figures
from harness.workloads.base import Params, Workload


@dataclass
class TimedRun:
    """What the timed loop and the reads after it gave, before any figure is computed from them."""

    timing: Timing
    work_per_step: float
    api: dict[str, str]
    checks: dict[str, Any]
    #: the backend's extra `timing` figures (its own, and the device's after_timing)
    extra: dict[str, Any]
    #: a data-parallel replica's settings for the record's `distributed`, from prepare
    distributed: dict[str, Any] | None


def summarize(samples: list[float], warnings: list[str]) -> stats.Summary:
    """The headline's statistics from per-block samples, with the warnings they call for."""
    summary = stats.summarize(samples)
    if samples:
        warnings.extend(summary.warnings)
        change = stats.drift(samples)
        if change is not None and change < -stats.DRIFT_WARN:
            warnings.append(
                f"rate fell {-change:.0%} from the first to the last timed block (first {samples[0]:.4g}, last "
                f"{samples[-1]:.4g}): the device slowed while measured (throttling, or other load on the machine?)"
            )
    return summary


def telemetry_fields(ctx: RunContext, median: float | None, warnings: list[str]) -> Telemetry:
    """NVML figures of the timed region: power, energy, clocks (with a throttling warning), memory used."""
    telemetry = Telemetry.of(ctx.telemetry.figures() if ctx.telemetry is not None else {})
    low, high = telemetry.sm_clock_min_mhz, telemetry.sm_clock_max_mhz
    if low and high and low < 0.9 * high:
        warnings.append(f"SM clock fell to {low} MHz during the timed region (max {high} MHz): throttling")
    if telemetry.energy_j and median:
        timed = telemetry.timed_seconds or 0
        telemetry = telemetry.updated(per_joule=median * timed / telemetry.energy_j if timed else None)  # images/J
    return telemetry


def live_gpu_size(neutral: str, framework_env: FrameworkEnv) -> dict:
    """The GPU's memory and SM count (tell datasheet variants apart): from the framework, else NVML."""
    memory, sms = framework_env.gpu_memory_bytes, framework_env.gpu_multiprocessors
    if memory is None:
        index = nvml.nvml_index(int(neutral.split(":", 1)[1]))
        memory = next((g["memory_total_bytes"] for g in nvml.gpus() if g["index"] == index), None)
    return {"memory_bytes": memory, "sm_count": sms}


def figures(workload: Workload, params: Params, timed: TimedRun, device: str, device_name: str | None,
            framework_env: FrameworkEnv, ctx: RunContext) -> Figures:
    """The record's figures of a timed run on `device` (a neutral name): statistics of the block rates, TFLOP/s,
    % of the datasheet peak, telemetry; the warnings they call for go to ctx."""
    samples = timed.timing.rates(timed.work_per_step)
    warnings = ctx.warnings
    summary = summarize(samples, warnings)
    overrun = timed.timing.warmup_overrun()
    if overrun:
        warnings.append(overrun)
    out = Figures(median=summary.median, iqr=summary.iqr, ci_low=summary.ci_low, ci_high=summary.ci_high,
                  cv=summary.cv, api=timed.api, samples=samples, step_time_s=timed.timing.step_time_s(),
                  first_step_s=timed.timing.first_step_s, checks=Checks.of(timed.checks),
                  timing=BlockTiming.of(timed.timing.fields(**timed.extra)), telemetry=Telemetry(),
                  tflops=tflops(workload, params, summary.median))
    if device.startswith("cuda:"):  # a datasheet peak is a GPU's; the CPU has none to miss
        out.has_datasheet = True
        out.pct_of_peak = gpu_pct_of_peak(workload, params, out.tflops, device, device_name, framework_env, warnings)
    out.telemetry = telemetry = telemetry_fields(ctx, summary.median, warnings)
    out.energy_j, out.avg_power_w, out.device_used_bytes = (telemetry.energy_j, telemetry.avg_power_w,
                                                            telemetry.device_used_bytes)
    return out


def tflops(workload: Workload, params: Params, median: float | None) -> float | None:
    """TFLOP/s of a run whose median headline is `median`: the headline itself for a TFLOP/s workload, else
    from the FLOPs of a step; None where the workload counts none."""
    if workload.metric == "tflops":
        return median
    if median is not None and workload.flops_per_step(params):
        return median * workload.flops_per_step(params) / workload.items_per_step(params) / 1e12
    return None


def gpu_pct_of_peak(workload: Workload, params: Params, tflops: float | None, device: str, device_name: str | None,
                    framework_env: FrameworkEnv, warnings: list[str]) -> float | None:
    """% of the GPU's datasheet peak, per GPU, at the workload's precision; a warning where the GPU is unknown."""
    precision = workload.peak_precision(params)
    size = live_gpu_size(device, framework_env)
    # TFLOP/s are global (every replica's work): % of peak is of all the replicas' GPUs together
    per_gpu = tflops / workload.replicas(params) if tflops else None
    missing = unknown_device_warning(device_name, precision=precision, **size)
    if missing:
        warnings.append(missing)
    return pct_of_peak(per_gpu, device_name, precision, **size)
