"""The race run as a session: one process of every configuration, then the race's rounds, as ordinary records.

A tuning session is an ordinary session (`prepare_session`, `run_session`) whose plan holds one process per
configuration (`measure.processes=1`) and whose added rounds come from the race (`RaceRounds`, in the place
of `processes: auto`'s rounds), so every process is a record `compare` and `report` read as always. The
race's state is a function of the session's records alone (each configuration's processes in the order of
their replicate), so `--resume` goes on where a session stopped.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace

from harness.results.compare import backend_variant, option_defaults, process_value
from harness.results.record import Result
from harness.seam.runspec import RunSpec, new_id
from harness.session.tune.race import Candidate, RaceRules, Standing, stand


def configuration_label(spec: RunSpec, varying: list[str]) -> str:
    """`tensorflow[keras=tf_keras] execution=compiled`: the backend variant and the params the sweep varies."""
    defaults = option_defaults(spec.backend)
    options = ",".join(f"{k}={v}" for k, v in sorted((spec.options or {}).items())
                       if v is not None and (k not in defaults or defaults[k] != v))
    return " ".join([spec.backend + (f"[{options}]" if options else ""),
                     *(f"{k}={spec.params[k]}" for k in varying if k in spec.params)])


def varying_params(specs: list[RunSpec]) -> list[str]:
    """The params whose value differs among the configurations (the search space's dimensions)."""
    keys = dict.fromkeys(k for s in specs for k in s.params)
    return [k for k in keys if len({repr(s.param(k)) for s in specs}) > 1]


def kind_of(record: Result) -> tuple:
    """A record's kind of configuration, whose history gives a prior: workload, backend variant, execution,
    device type."""
    return (record.workload, backend_variant(record), record.param("execution"),
            str(record.device or "").split(":")[0])


def history_priors(records: list[Result], metric: str) -> dict[tuple, float]:
    """Per kind of configuration (workload, backend variant, execution, device type) the pooled (RMS) CV
    between processes of its configurations with at least 2 ok processes in these records."""
    by_key: dict[tuple, list[float]] = {}
    for r in records:
        value = process_value(r, metric) if r.status == "ok" and not r.probe_of else None
        if value:
            by_key.setdefault((kind_of(r), r.run_key), []).append(value)
    squares: dict[tuple, list[float]] = {}
    for (kind, _), values in by_key.items():
        if len(values) >= 2 and statistics.mean(values):
            squares.setdefault(kind, []).append((statistics.stdev(values) / statistics.mean(values)) ** 2)
    return {kind: math.sqrt(statistics.mean(s)) for kind, s in squares.items()}


@dataclass
class RaceRounds:
    """The race's rounds of a tuning session (the `next_round` of `processes: auto`'s AdaptiveRounds)."""

    configurations: list[RunSpec]
    rules: RaceRules
    metric: str = "median"
    max_device_memory: int | None = None  # bytes of allocator peak a configuration may need
    priors: dict[tuple, float] = field(default_factory=dict)
    limits: dict[str, int] = field(default_factory=dict)  # run_key -> most processes (else the rules' most)
    seed: int = 0
    limit: int | None = None
    rounds: int = 0

    def __post_init__(self):
        self.labels = {s.run_key: configuration_label(s, varying_params(self.configurations))
                       for s in self.configurations}

    def candidates(self, results: list[Result]) -> tuple[list[Candidate], dict[str, str]]:
        """Each configuration's ok process values in replicate order, and those out before the race (failed,
        over --max-device-memory)."""
        by_key: defaultdict[str, list[Result]] = defaultdict(list)  # a configuration not yet run: no process
        for r in sorted(results, key=lambda r: r.replicate):
            if not r.probe_of:
                by_key[r.run_key].append(r)
        out, excluded = [], {}
        for spec in self.configurations:
            done = by_key[spec.run_key]
            ok = [r for r in done if r.status == "ok" and process_value(r, self.metric) is not None]
            name = self.labels[spec.run_key]
            if done and not ok:
                why = str(done[-1].error or done[-1].status).splitlines()[0][:160]
                excluded[name] = f"gave no {self.metric} value: {done[-1].status}: {why}"
            peaks = [r.peak_allocated_bytes for r in ok if r.peak_allocated_bytes]
            if self.max_device_memory is not None and peaks and max(peaks) > self.max_device_memory:
                excluded[name] = (f"more device memory than --max-device-memory: its allocator peak {max(peaks) / 2**30:.2f} GiB > "
                                  f"{self.max_device_memory / 2**30:.2f} GiB")
            prior = self.priors.get(kind_of(ok[0])) if ok else None
            limit = max(0, self.limits.get(spec.run_key, self.rules.max_processes) - (len(done) - len(ok)))
            out.append(Candidate(name, spec.backend, tuple(process_value(r, self.metric) for r in ok), prior,
                                 limit))
        return out, excluded

    def standings(self, results: list[Result]) -> tuple[list[Standing], list[Candidate]]:
        """The race over these records, round by round (a configuration's first k processes in round k), so the
        drops stand as they were made (a verdict's, a failure's) and reasons keep the round they were given in."""
        candidates, dropped = self.candidates(results)
        most = max((len(c.values) for c in candidates), default=0)
        for k in range(1, most + 1):
            standings = stand([replace(c, values=c.values[:k]) for c in candidates], self.rules, dropped)
            dropped = {name: why for s in standings for name, why in s.dropped.items()}
        return stand(candidates, self.rules, dropped), candidates

    def next_round(self, results: list[Result]) -> list[RunSpec]:
        """One more process of each configuration the race wants measured, shuffled with the session's seed."""
        standings, _ = self.standings(results)
        wanted = {name for s in standings for name in s.measure_next}
        done = Counter(r.run_key for r in results if not r.probe_of)
        specs = [replace(s, run_id=new_id(), replicate=done[s.run_key])
                 for s in self.configurations if self.labels[s.run_key] in wanted]
        self.rounds += 1
        random.Random(self.seed * 1_000_003 + self.rounds).shuffle(specs)
        return specs
