"""The baseline of a comparison: the compared value each match group is measured against, as `--baseline` names
it (a backend without options names its one variant; a session by a unique prefix of its id), else the fewest
replicas (by scaling), else the first seen, backends in a fixed order so that the default does not change with a
session's shuffled run order."""

from __future__ import annotations

import math

from harness.errors import InputError, did_you_mean
from harness.results.compare.records import canonical_backend
from harness.results.record import Result
from harness.seam.backend import BUILTIN_BACKENDS


def label(values: tuple) -> str:
    """A compared value (one per --by field) as the comparison names it: `torch / fp32`."""
    return " / ".join("-" if v is None else str(v) for v in values)


def _replicas_order(value) -> float:
    """A replicas value as a number for ordering (one-field keys come as 1-tuples); unknown last."""
    v = value[0] if isinstance(value, tuple) and len(value) == 1 else value
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.inf


def _baseline_values(baseline: str, by: list[str]) -> tuple[str, ...]:
    parts = [baseline] if len(by) == 1 else [p.strip() for p in baseline.replace("/", ",").split(",")]
    if len(parts) != len(by):
        raise InputError(
            f"--baseline {baseline!r}: give one value per --by field ({', '.join(by)}), separated by commas",
            field="--baseline",
        )
    return tuple(canonical_backend(p) if f == "backend" else p for f, p in zip(by, parts))


def resolve_baseline(baseline: str, by: list[str], order: list[tuple]) -> tuple:
    """The compared value `--baseline` names; a backend without options names its one variant if it has one."""
    wanted = _baseline_values(str(baseline), by)
    matching = [v for v in order if tuple(str(x) for x in v) == wanted]
    if not matching and "backend" in by:
        i = by.index("backend")
        others = [j for j in range(len(by)) if j != i]

        def fits(v: tuple) -> bool:
            return (str(v[i]).split("[", 1)[0] == wanted[i]
                    and all(str(v[j]) == wanted[j] for j in others))

        matching = [v for v in order if fits(v)]
        if len(matching) > 1:
            names = ", ".join(repr(label(v)) for v in matching)
            raise InputError(f"--baseline {baseline}: several variants match ({names}); name one", field="--baseline")
    if not matching:
        seen = ", ".join(repr(label(v)) for v in order)
        names = [label(v) for v in order] + ([str(v[0]).split("[", 1)[0] for v in order] if by == ["backend"] else [])
        hint = did_you_mean(baseline, names)
        raise InputError(f"--baseline {baseline}: no result has it for {', '.join(by)} (seen: {seen}){hint}",
                         field="--baseline")
    return matching[0]


def session_baseline(records: list[Result], sessions, baseline: str | None) -> str | None:
    """The baseline of a comparison by session: the one named, else the first of `sessions`; a unique
    prefix of a session id of the records names that session."""
    ids = list(dict.fromkeys(r.session_id for r in records))
    wanted = baseline if baseline is not None else (sessions[0] if sessions else None)
    if wanted is None:
        return baseline
    matches = [s for s in ids if str(s).startswith(wanted)]
    return matches[0] if wanted not in ids and len(matches) == 1 else wanted


def backend_order(order: list[tuple], by: list[str]) -> list[tuple]:
    """Compared values by backend in a fixed order: the built-in backends first, as harness lists them (torch,
    then tensorflow), then the others by name, each backend's variants by name (`tensorflow[keras=keras3]`
    before `tensorflow[keras=tf_keras]`); values alike there keep the order first seen. A session interleaves
    its runs in a shuffled order, so the first backend seen, and with it the default baseline of
    `compare --by backend`, would change from one session to the next."""
    if "backend" not in by:
        return order
    at, builtin = by.index("backend"), list(BUILTIN_BACKENDS)

    def rank(value: tuple) -> tuple:
        name = str(value[at])
        base = name.split("[", 1)[0]
        return (builtin.index(base) if base in builtin else len(builtin), base, name)

    return sorted(order, key=rank)


def baseline_of(sides: dict, order: list[tuple], wanted: tuple | None, by_scaling: bool) -> tuple | None:
    """A match group's baseline value: the one named, else the fewest replicas (by scaling), else the first seen;
    None for a group with nothing to compare."""
    if len(sides) < 2:
        return None
    if wanted is not None:
        return wanted if wanted in sides else None
    if by_scaling:  # the fewest replicas is the baseline, whichever ran first
        return min(sides, key=lambda v: (_replicas_order(v), order.index(v)))
    return min(sides, key=order.index)
