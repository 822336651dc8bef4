"""The timed loop every backend uses: first step, warm-up, timed blocks, adaptive repetition.

Framework-free: a backend hands in its step and a Clock that knows how to wait for its device.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from harness.timing import stats
from harness.timing.settings import AUTO, Measure


@dataclass(frozen=True)
class BlockTime:
    """One timed region: synchronized wall seconds, and device seconds where the device has events."""

    wall_s: float
    device_s: float | None = None


class Clock(Protocol):
    """Reads time around device work that may be asynchronous."""

    def sync(self) -> None:
        """Wait until all work queued on the device has finished."""

    def start(self) -> Any:
        """Synchronize, then open a timed region; return a token for stop()."""

    def stop(self, token: Any) -> BlockTime:
        """Close the region opened by start(), synchronizing before the clock is read."""


class WallClock:
    """perf_counter around a region, with an optional device synchronization before each read."""

    def __init__(self, sync: Callable[[], None] | None = None):
        self._sync = sync or (lambda: None)

    def sync(self) -> None:
        """Wait for the device."""
        self._sync()

    def start(self) -> float:
        """Wait for the device, then note the time: the token stop takes."""
        self._sync()
        return time.perf_counter()

    def stop(self, token: float) -> BlockTime:
        """Wait for the device; the seconds since `token`."""
        self._sync()
        return BlockTime(time.perf_counter() - token)


class Telemetry(Protocol):
    """Something sampled during the timed region (GPU power, clocks); must not disturb it."""

    def start(self) -> None:
        """Begin sampling (as the timed region begins)."""

    def stop(self) -> None:
        """End sampling (as the timed region ends)."""


@dataclass
class Timing:
    """What run_timed measured. `blocks` holds every timed block; warm-up is not in it."""

    first_step_s: float
    steps_per_block: int
    blocks: list[BlockTime] = field(default_factory=list)
    stop_reason: str = "repeats"
    #: how steps_per_block was chosen under `steps: auto` (None: the scenario gave the number)
    calibration: dict | None = None
    #: training steps one call of the step runs (Prepared.steps_per_call); a block is steps_per_block calls
    steps_per_call: int = 1
    #: warm-up calls run, where the workload's floor raised them above `measure.warmup` (None: as asked)
    warmup_raised_to: int | None = None
    #: wall seconds of the warm-up calls (between the first step and the calibration or first block), synchronized
    #: at the end; `warmup_overrun` reads one-time work that landed there from it
    warmup_s: float | None = None
    #: warm-up calls run
    warmup_calls: int = 0

    @property
    def wall_s(self) -> list[float]:
        """Synchronized wall seconds of each timed block."""
        return [b.wall_s for b in self.blocks]

    @property
    def device_s(self) -> list[float] | None:
        """Device seconds of each timed block; None unless the device timed every one."""
        values = [b.device_s for b in self.blocks]
        return None if any(v is None for v in values) else values

    def rates(self, work_per_step: float) -> list[float]:
        """Per-block rate: work_per_step * steps (calls x steps_per_call) / synchronized wall seconds."""
        return [work_per_step * self.steps_per_block * self.steps_per_call / w for w in self.wall_s]

    def step_time_s(self) -> float:
        """Median seconds of one training step across blocks (a call's seconds / steps_per_call)."""
        return stats.median([w / (self.steps_per_block * self.steps_per_call) for w in self.wall_s])

    def fields(self, **extra) -> dict:
        """The record's `timing` entry: block sizes and times, why the loop stopped, plus `extra`."""
        return {
            "steps_per_block": self.steps_per_block,
            "stop_reason": self.stop_reason,
            "block_wall_s": self.wall_s,
            "block_device_s": self.device_s,
            **({"steps_chosen": self.calibration} if self.calibration else {}),
            # a record whose step runs one training step per call keeps the fields it always had
            **({"steps_per_call": self.steps_per_call} if self.steps_per_call != 1 else {}),
            **({"warmup_raised_to": self.warmup_raised_to} if self.warmup_raised_to is not None else {}),
            **({"warmup_s": self.warmup_s} if self.warmup_s is not None else {}),
            **extra,
        }

    def warmup_overrun(self) -> str | None:
        """A warning where the warm-up took much longer than as many timed calls (at least WARMUP_OVERRUN_S and
        WARMUP_OVERRUN_SHARE of the first step more): one-time work, a second compile or trace, say, ran after
        the first step, so `first_step_s` leaves part of the compile out. None otherwise."""
        if self.warmup_s is None or not self.warmup_calls or not self.blocks:
            return None
        extra = self.warmup_s - self.warmup_calls * self.step_time_s() * self.steps_per_call
        if extra < WARMUP_OVERRUN_S or extra < WARMUP_OVERRUN_SHARE * self.first_step_s:
            return None
        return (f"the warm-up took {self.warmup_s:.1f} s for {self.warmup_calls} call(s), {extra:.1f} s more than "
                f"as many timed calls: one-time work (a second compile or trace, autotuning) ran after the first "
                f"step, which first_step_s ({self.first_step_s:.1f} s) leaves out")


#: A warm-up that lasts this many seconds, and this share of the first step, longer than as many timed calls
#: has had one-time work in it (Timing.warmup_overrun). In the H200 stores a compile that landed in the
#: warm-up took 10-19 s (19-50% of its first step); no other warm-up ran more than 2.3 s (13%) over.
WARMUP_OVERRUN_S = 2.0
WARMUP_OVERRUN_SHARE = 0.15

@dataclass(frozen=True)
class StopRule:
    """When the timed loop ends: after `repeats` blocks, or, adaptive (`min_time_s`, `target_ci_pct`), once
    the timed total and the CI of the median rate are reached, at most after `max_repeats` blocks."""

    repeats: int
    max_repeats: int
    min_time_s: float | None = None
    target_ci_pct: float | None = None

    @classmethod
    def of(cls, measure: Measure) -> "StopRule":
        """The rule of a `measure:` block."""
        repeats = measure.repeats
        max_repeats = measure.max_repeats or (10 * repeats if measure.adaptive else repeats)
        return cls(repeats=repeats, max_repeats=max(max_repeats, repeats), min_time_s=measure.min_time_s,
                   target_ci_pct=measure.target_ci_pct)

    @property
    def adaptive(self) -> bool:
        """Whether the loop may go on past `repeats` blocks."""
        return bool(self.min_time_s) or bool(self.target_ci_pct)

    def stop_reason(self, timing: Timing, work_per_step: float) -> str | None:
        """Why the loop ends after the blocks timed so far (`repeats`, `min_time`, `target_ci`, `max_repeats`);
        None: it goes on."""
        n = len(timing.blocks)
        if n < self.repeats:
            return None
        if not self.adaptive:
            return "repeats"
        min_time, target = self.min_time_s, self.target_ci_pct
        enough_time = not min_time or sum(timing.wall_s) >= float(min_time)
        half = stats.ci_half_width_pct(timing.rates(work_per_step)) if target else None
        narrow = not target or (half is not None and half <= float(target))
        if enough_time and narrow:
            return "target_ci" if target else "min_time"
        return "max_repeats" if n >= self.max_repeats else None


def run_timed(
    step: Callable[[], Any],
    clock: Clock,
    measure: Measure,
    *,
    work_per_step: float = 1.0,
    telemetry: Telemetry | None = None,
    progress: Callable[..., None] | None = None,
    steps_per_call: int = 1,
    warmup_floor_steps: int = 0,
) -> Timing:
    """Time `step` as the measure block asks.

    The first call is timed alone (trace, compile, autotune land there), then `warmup` untimed calls,
    then blocks of `steps` calls each, each block synchronized at both ends. At least `repeats`
    blocks run; with `min_time_s` or `target_ci_pct`, blocks go on until the timed total reaches
    min_time_s and the CI half-width of the median rate falls to target_ci_pct, or until
    `max_repeats` blocks (default 10 x repeats). The reason the loop ended is recorded.
    `progress(phase, **figures)` hears of each phase between device synchronizations (never inside
    a timed block): `first_step` (starting), `warmup` (with first_step_s), `block` (block i of
    repeats, the rate so far), so a parent can show where a long run is.
    `steps_per_call`: training steps one call of `step` runs (Keras `fit` over k steps); `steps`, `warmup`
    and `steps: auto` count calls, every rate and per-step time counts training steps, and `first_step_s` is
    the first call's (its k steps, compilation included).
    `warmup_floor_steps`: training steps the workload needs before timing (Workload.warmup_floor); the
    warm-up runs at least enough calls to cover them with the first call, and the record says when it did.
    """
    report = progress or (lambda phase, **figures: None)
    rule = StopRule.of(measure)
    warmup = measure.warmup
    floor = max(math.ceil(warmup_floor_steps / max(steps_per_call, 1)) - 1, 0)  # calls beyond the first
    raised = floor if floor > warmup else None
    warmup = max(warmup, floor)
    auto = measure.steps == AUTO

    report("first_step", steps=None if auto else measure.steps, repeats=rule.repeats, warmup=warmup)
    token = clock.start()
    step()
    first = clock.stop(token).wall_s

    report("warmup", first_step_s=first, warmup=warmup)
    began = time.perf_counter()  # the device is idle: the first step's stop synchronized it
    for _ in range(warmup):
        step()
    clock.sync()
    warmup_s = time.perf_counter() - began

    calibration = calibrate(step, clock, measure.min_block_s, measure.max_block_steps) if auto else None
    steps = calibration["steps"] if calibration else measure.steps
    timing = Timing(first_step_s=first, steps_per_block=steps, calibration=calibration, steps_per_call=steps_per_call,
                    warmup_raised_to=raised, warmup_s=warmup_s, warmup_calls=warmup)
    if telemetry is not None:
        telemetry.start()
    try:
        time_blocks(step, clock, timing, rule, work_per_step, report)
    finally:
        if telemetry is not None:
            telemetry.stop()
    return timing


#: Runs of the chosen size whose median decides a block's steps (`steps: auto`): one slow call (a page fault, a
#: neighbour's burst) among them no longer decides the block length of a whole run. On a loaded 2-core machine a
#: 0.2 ms GEMM step once timed 23.5 ms alone, and its blocks then lasted 2-62 ms instead of 0.2 s.
CALIBRATION_RUNS = 3
#: Times a run's steps per block may be raised after a timed block fell short of `min_block_s`.
MAX_BLOCK_RAISES = 3


def _timed_steps(step: Callable[[], Any], clock: Clock, n: int) -> float:
    token = clock.start()
    for _ in range(n):
        step()
    return clock.stop(token).wall_s


def calibrate(step: Callable[[], Any], clock: Clock, min_block_s: float, max_steps: int) -> dict:
    """How many steps make a block of at least `min_block_s` (`steps: auto`), after warm-up.

    Like timeit's autorange: time 1, 10, 100 ... steps (each run synchronized) until a run lasts a tenth of
    `min_block_s`; then that size is timed CALIBRATION_RUNS times in all, and their median decides, going on up
    where the median falls short of the tenth (the first run was a slow outlier). Steps: ceil(1.1 x min_block_s /
    seconds per step), at least 1 and at most `max_steps`. A single step that already lasts `min_block_s` is
    timed once (blocks of one step; `time_blocks` re-checks them). A 10 us step costs about
    3.3 x min_block_s / 10 of extra warm-up.
    """
    n = 1
    while True:
        runs = [_timed_steps(step, clock, n)]
        if runs[0] >= min_block_s / 10 or n >= max_steps:
            if not (n == 1 and runs[0] >= min_block_s):
                runs += [_timed_steps(step, clock, n) for _ in range(CALIBRATION_RUNS - 1)]
            seconds = stats.median(runs)
            if seconds >= min_block_s / 10 or n >= max_steps:
                break
        n = min(n * 10, max_steps)
    per_step = seconds / n
    # 10% over the minimum: the calibration run includes its own synchronisation, a block of that many steps a little less
    steps = max(1, min(max_steps, math.ceil(1.1 * min_block_s / per_step))) if per_step > 0 else max_steps
    capped = steps == max_steps and per_step * max_steps < min_block_s
    return {"steps": steps, "min_block_s": min_block_s, "max_block_steps": max_steps, "calibration_steps": n,
            "calibration_s": seconds, "calibration_runs_s": runs, "step_s": per_step, "capped": capped}


def _raise_short_block(timing: Timing) -> bool:
    """Under `steps: auto`, after a block shorter than `min_block_s`: the steps raised as that block's time per step
    asks, the blocks so far dropped (every block of a run has one size), and the raise recorded in the calibration
    (`raised`); True. False where the block was long enough, the steps are at their cap, or MAX_BLOCK_RAISES were
    made already."""
    cal, block = timing.calibration, timing.blocks[-1]
    if cal is None or block.wall_s >= cal["min_block_s"] or timing.steps_per_block >= cal["max_block_steps"]:
        return False
    raised = cal.setdefault("raised", [])
    if len(raised) >= MAX_BLOCK_RAISES:
        return False
    per_step = block.wall_s / timing.steps_per_block
    steps = min(cal["max_block_steps"], max(timing.steps_per_block + 1,
                                            math.ceil(1.1 * cal["min_block_s"] / per_step) if per_step > 0 else 0))
    raised.append({"from": timing.steps_per_block, "to": steps, "block_s": block.wall_s,
                   "blocks_dropped": len(timing.blocks)})
    timing.blocks.clear()
    timing.steps_per_block = cal["steps"] = steps
    return True


def time_blocks(step: Callable[[], Any], clock: Clock, timing: Timing, rule: StopRule, work_per_step: float,
                report: Callable[..., None]) -> None:
    """Time blocks of `timing.steps_per_block` calls into `timing` until `rule` stops them, noting why."""
    while True:
        token = clock.start()
        for _ in range(timing.steps_per_block):
            step()
        timing.blocks.append(clock.stop(token))
        if _raise_short_block(timing):
            continue
        report("block", block=len(timing.blocks), repeats=rule.repeats, max_repeats=rule.max_repeats,
               block_s=timing.blocks[-1].wall_s, rate=stats.median(timing.rates(work_per_step)))
        reason = rule.stop_reason(timing, work_per_step)
        if reason is not None:
            timing.stop_reason = reason
            return
