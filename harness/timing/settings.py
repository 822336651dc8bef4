"""The `measure:` block: its schema (Measure), with what it means (its processes, whether it is adaptive).

Framework-free and read on both sides of the worker boundary, as one typed object: the scenario validates it,
the plan counts processes from it, a RunSpec carries it to the worker, whose timed loop (harness.timing.loop)
follows it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StrictBool, field_validator, model_validator

from harness.fields import NumbersNotBooleans
from harness.timing import stats

#: What `steps: auto` and `processes: auto` mean; a number keeps its old meaning.
AUTO = "auto"
#: The shortest a timed block lasts under `steps: auto`: torch.utils.benchmark's blocked_autorange times
#: blocks of at least 0.2 s, pyperf calibrates each value to at least 0.1 s. 0.2 s keeps a GPU's launch
#: jitter and one slow step under 1% of a block even for steps of a few microseconds.
MIN_BLOCK_S = 0.2
#: The shortest run timeout accepted (measure.timeout_s, --timeout), in seconds: a worker process starts a Python
#: and imports a framework before its first step, so a shorter limit could only ever time every run out.
MIN_TIMEOUT_S = 1.0


class Measure(NumbersNotBooleans):
    """The `measure:` block: warm-up and timed steps, blocks, worker processes, and when a run is given up."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    warmup: int = Field(10, ge=0, le=1_000_000)
    #: Steps per timed block: a number, or `auto` (after warm-up, as many as make a block last at least
    #: `min_block_s`, at most `max_block_steps`; one step when a single step is already that long).
    steps: Annotated[int, Field(ge=1, le=10_000_000)] | Literal["auto"] = AUTO
    min_block_s: float = Field(MIN_BLOCK_S, gt=0, le=3600)
    max_block_steps: int = Field(100_000, ge=1, le=10_000_000)
    repeats: int = Field(5, ge=1, le=10_000)
    min_time_s: float | None = Field(None, ge=0, le=86_400)
    max_repeats: int | None = Field(None, ge=1, le=100_000)
    target_ci_pct: float | None = Field(None, gt=0, le=100)
    timeout_s: float = Field(1800, ge=MIN_TIMEOUT_S, le=7 * 86_400)
    #: Worker processes per configuration, each one sample of the comparison (its median), interleaved
    #: across configurations. A number runs exactly that many; `auto` runs `min_processes` (by default the
    #: fewest with which a verdict can exist at all) and then adds processes to a configuration, one round
    #: at a time, until the 95% CI of its median over processes is within `process_ci_pct` percent, or it
    #: has `max_processes` (README, "Statistics").
    processes: Annotated[int, Field(ge=1, le=100)] | Literal["auto"] = AUTO
    min_processes: int | None = Field(None, ge=2, le=100)
    max_processes: int = Field(10, ge=2, le=100)
    process_ci_pct: float = Field(1.0, gt=0, le=100)
    #: The frameworks' compilation caches: `cold`, every process with an empty cache of its own (its first
    #: step compiles and autotunes from nothing, and so is an independent sample); `warm`, one cache per
    #: configuration shared by its processes within the session (the first runs cold; later ones reuse its
    #: compiled code and autotuning choices). README, "Statistics", says why cold is the default.
    compile_cache: Literal["cold", "warm"] = "cold"
    #: After the timed blocks, profile a few more steps with the framework's own profiler: the record's
    #: `profile` breakdown (harness.worker.profile, docs/profile.md). Never inside the timed blocks.
    profile: StrictBool = False
    #: Where the profiler's raw trace is kept (a folder; each run writes beneath it); None: not kept.
    profile_trace_dir: str | None = Field(None, min_length=1)
    #: Let this scenario's runs be timed while other harness sessions on the host time theirs (one per GPU,
    #: say): the host-wide timing lock is taken shared, not exclusive (harness.worker.hostlock). Each record
    #: says so, and `compare` marks verdicts resting on such runs as measured on a busy machine.
    share_host: StrictBool = False

    @field_validator("steps", "processes", mode="before")
    @classmethod
    def _auto_or_count(cls, value, info):
        # one message for a value that is neither `auto` nor a count, where the union would give two
        most = 10_000_000 if info.field_name == "steps" else 100
        if value == AUTO:
            return value
        whole = isinstance(value, int) and not isinstance(value, bool)
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value, whole = int(value), True
        if not whole or not 1 <= value <= most:
            raise ValueError(f"expected auto or a whole number from 1 to {most:,}")
        return value

    @model_validator(mode="after")
    def _processes_in_order(self):
        if self.min_processes is not None and self.min_processes > self.max_processes:
            raise ValueError(f"min_processes ({self.min_processes}) is above max_processes ({self.max_processes})")
        return self

    @classmethod
    def from_stored(cls, measure: Mapping) -> "Measure":
        """The measure of a spec as a plan stored it (any version): its settings, the defaults for those it lacks
        or holds as null, and keys this version has no setting for (an earlier version's) left out."""
        return cls.model_validate({k: v for k, v in measure.items() if k in cls.model_fields and v is not None})

    @property
    def adaptive(self) -> bool:
        """Whether the timed loop may go on past `repeats` blocks (`min_time_s` or `target_ci_pct`)."""
        return bool(self.min_time_s) or bool(self.target_ci_pct)

    def process_bounds(self) -> tuple[int, int]:
        """(least, most) worker processes per configuration: equal for a number; for `auto`, `min_processes`
        (default: the fewest a verdict needs per side, stats.processes_needed) up to `max_processes`."""
        if self.processes != AUTO:
            return self.processes, self.processes
        least = self.min_processes or stats.processes_needed(stats.VERDICT_ALPHA)
        return least, max(least, self.max_processes)

    def describe(self) -> str:
        """What the block will do, in a line, `auto` included (validate and --dry-run say it)."""
        least, most = self.process_bounds()
        steps = f"steps auto (blocks >= {self.min_block_s:g} s)" if self.steps == AUTO else f"{self.steps} steps"
        blocks = f"{self.repeats}{'+' if self.adaptive else ''} blocks"
        if least == most:
            processes = f"{least} process(es)"
        else:
            processes = f"processes auto {least}-{most} (until the CI over processes is within {self.process_ci_pct:g}%)"
        shared = "; host shared with other sessions (share_host)" if self.share_host else ""
        return f"{steps} x {blocks}; {processes}; caches {self.compile_cache}{shared}"
