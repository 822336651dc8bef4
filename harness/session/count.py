"""How many runs a plan holds, as people read it: configurations times worker processes.

`validate` and `run --dry-run` count through the same planning code as `run`, so they agree with it.
A configuration's process count is a range under `measure.processes: auto` (the least planned, the most it
may reach as rounds are added); a fixed count is a range of one.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from harness.seam.runspec import RunSpec


def process_bounds(spec: RunSpec, planned: int) -> tuple[int, int]:
    """(least, most) worker processes of a configuration whose first run is `spec`, `planned` of them in the plan:
    a fixed `measure.processes` runs what is planned; `auto` plans its least and may add up to its most (per
    planned occurrence: a sweep value given twice plans the configuration twice)."""
    least, most = spec.measure.process_bounds()
    if least == most:
        return planned, planned
    return planned, most * max(1, planned // least)


@dataclass(frozen=True)
class PlanCount:
    """A plan's size: its configurations and its runs, the least and the most (equal where fixed)."""

    configurations: int
    least: int
    most: int

    @property
    def runs(self) -> str:
        """'10' where fixed, '10-40' where adaptive."""
        return str(self.least) if self.least == self.most else f"{self.least}-{self.most}"

    @property
    def processes(self) -> str:
        """Processes per configuration: '5', or '2-8' where they differ or adapt."""
        if not self.configurations:
            return "0"
        low, high = self.least // self.configurations, -(-self.most // self.configurations)
        exact = self.least % self.configurations == 0 and self.most % self.configurations == 0
        if exact and low == high:
            return str(low)
        return f"{low}-{high}" if exact else "varying"


def count_plan(plan: list[RunSpec]) -> PlanCount:
    """The configurations of `plan` (a run_key each) and its runs: the least and the most."""
    firsts: dict[str, RunSpec] = {}
    planned = Counter(spec.run_key for spec in plan)
    for spec in plan:
        firsts.setdefault(spec.run_key, spec)
    bounds = [process_bounds(firsts[key], planned[key]) for key in firsts]
    return PlanCount(len(firsts), sum(b[0] for b in bounds), sum(b[1] for b in bounds))
