"""The profile breakdowns of compared sides, paired as `harness compare` pairs sides: per match group, each
compared value's classes next to its baseline's, with the difference in milliseconds per step.

Each record's `profile` (harness.timing.profile) gives seconds per step in each class and `idle`; a side
with several processes gives their mean. Records without a breakdown take no part; a group where only
one side has one says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import InputError
from harness.results.compare.baseline import label, resolve_baseline
from harness.results.compare.pairing import grouped
from harness.results.compare.records import (
    ok_records,
    parse_by,
)
from harness.results.record import Result
from harness.timing import stats
from harness.timing.profile import CLASSES

#: The rows of a breakdown: the classes, then the time no kernel covered.
PARTS = (*CLASSES, "idle")


def profile_ms(record: Result) -> dict[str, float] | None:
    """Milliseconds per step in each class and `idle` of a record's breakdown; None where it has none."""
    return record.profile.ms_per_step(CLASSES)


@dataclass(frozen=True)
class Side:
    """One compared value's breakdown in a match group: the mean over its profiled processes."""

    label: str
    ms: dict[str, float]
    processes: int
    #: the timed step, ms (median of the processes' step_time_s), beside the profiled one
    timed_ms: float | None
    activity: str
    #: the classes its records' profiles sorted kernels into (a class added since they were stored is not one)
    classified: frozenset = frozenset(CLASSES)

    @classmethod
    def of(cls, name: str, records: list[Result]) -> "Side | None":
        """The side of these records; None where none of them has a breakdown."""
        found = [(r, ms) for r in records if (ms := profile_ms(r)) is not None]
        if not found:
            return None
        mean = {p: sum(ms[p] for _, ms in found) / len(found) for p in PARTS}
        timed = [r.step_time_s for r, _ in found if r.step_time_s]
        classified = frozenset(c for r, _ in found for c in (r.profile.classes_s or {}))
        return cls(name, mean, len(found), 1e3 * stats.median(timed) if timed else None,
                   str(found[0][0].profile.activity or ""), classified)

    @property
    def step_ms(self) -> float:
        """The profiled step: every class plus idle."""
        return sum(self.ms.values())


def shown_parts(sides) -> tuple[str, ...]:
    """The parts a breakdown of these sides shows: every class one of them was profiled with, and idle (a class
    none of their stored profiles knew is not shown as a zero they never measured)."""
    return tuple(p for p in PARTS if p == "idle" or any(p in side.classified for side in sides))


@dataclass(frozen=True)
class Pair:
    """A compared side beside its baseline, in one match group (`where`: what the group holds fixed)."""

    where: dict
    baseline: Side
    value: Side

    @property
    def parts(self) -> tuple[str, ...]:
        """The parts this pair's breakdown shows."""
        return shown_parts((self.baseline, self.value))

    def diff_ms(self, part: str) -> float:
        """The side's milliseconds per step in `part` minus the baseline's."""
        return self.value.ms[part] - self.baseline.ms[part]

    def sentence(self, most: int = 4) -> str:
        """`VALUE vs BASELINE: +X ms elementwise, +Y ms reduce, ...`, the largest differences first."""
        ranked = sorted(self.parts, key=lambda p: -abs(self.diff_ms(p)))[:most]
        parts = ", ".join(f"{self.diff_ms(p):+.2f} ms {p}" for p in ranked)
        total = self.value.step_ms - self.baseline.step_ms
        return f"{self.value.label} vs {self.baseline.label}: {total:+.2f} ms a step ({parts})"

    def as_dict(self) -> dict:
        """The pair as plain data (JSON): the group, both sides' ms per step and the differences."""
        return {"where": self.where, "baseline": self.baseline.label, "value": self.value.label,
                "baseline_ms": self.baseline.ms, "value_ms": self.value.ms,
                "diff_ms": {p: self.diff_ms(p) for p in PARTS},
                "baseline_step_ms": self.baseline.step_ms, "value_step_ms": self.value.step_ms,
                "baseline_timed_ms": self.baseline.timed_ms, "value_timed_ms": self.value.timed_ms,
                "baseline_processes": self.baseline.processes, "value_processes": self.value.processes}


def breakdown_pairs(records, by, baseline: str | None = None) -> list[Pair]:
    """Each compared value's breakdown beside its match group's baseline (the value named, else the first
    seen), for the ok records that carry a breakdown. InputError where no record has one, or no two
    profiled sides differ only in the compared fields."""
    by = parse_by([by] if isinstance(by, str) else by)
    profiled = [r for r in ok_records(records) if profile_ms(r) is not None]
    if not profiled:
        raise InputError("--breakdown: no ok result carries a profile breakdown; run with --profile "
                         "(or measure.profile: true) first", field="--breakdown")
    order, groups = grouped(profiled, by)
    wanted = resolve_baseline(baseline, by, order) if baseline is not None else None
    pairs = []
    for key, sides in groups.items():
        base_value = wanted if wanted is not None else min(sides, key=order.index)
        if base_value not in sides or len(sides) < 2:
            continue
        base = Side.of(label(base_value), sides[base_value])
        where = {name.removeprefix("params."): value for name, value in key}
        for value in sorted((v for v in sides if v != base_value), key=order.index):
            pairs.append(Pair(where, base, Side.of(label(value), sides[value])))
    if not pairs:
        seen = ", ".join(repr(label(v)) for v in order)
        raise InputError(f"--breakdown --by {','.join(by)}: no two profiled results differ only in "
                         f"{', '.join(by)} (profiled values: {seen})", field="--by")
    return pairs
