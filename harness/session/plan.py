"""The plan: one RunSpec per (sweep point x backend x device x process).

Each configuration runs in `measure.processes` separate worker processes (replicates: one sample
each for the comparison); under `processes: auto` the plan holds the least of them, and
harness.session.rounds adds rounds as the results ask for them. The plan runs them in rounds, every configuration once per round, in an
order shuffled from the scenario's seed, so slow drift of the machine (clocks, heat, other load)
falls on every configuration alike instead of on whichever always runs last.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

from harness.scenario.load import sweep_points
from harness.scenario.schema import Scenario
from harness.seam.backend import available_backends
from harness.seam.runspec import RunSpec, new_id, run_key
from harness.workloads import WORKLOADS


def build_plan(
    scenario: Scenario,
    session_id: str,
    *,
    backends: list[str] | None = None,
    devices: list[str] | None = None,
    timeout_s: float | None = None,
) -> list[RunSpec]:
    """Expand a validated scenario into run specs; `backends` / `devices` replace the file's lists.

    Every configuration appears `measure.processes` times (replicate 0, 1, ...; one run_key), in
    rounds: round r holds replicate r of every configuration, in an order shuffled reproducibly
    from the scenario's seed (a new order each round).
    """
    workload = WORKLOADS[scenario.workload]
    measure = scenario.measure
    if timeout_s is not None:  # --timeout, checked as the command line was read
        measure = measure.model_copy(update={"timeout_s": float(timeout_s)})
    registry = available_backends()
    configurations: list[RunSpec] = []
    planned: set[tuple] = set()
    keys = list(scenario.sweep)
    indices = itertools.product(*(range(len(scenario.sweep[k])) for k in keys)) if keys else [()]
    for point, index in zip(sweep_points(scenario), indices):
        params = workload.validate({**scenario.params, **{k: v for k, v in point.items() if "." not in k}}).model_dump()
        for backend in backends or scenario.backends:
            known = registry.get(backend)
            # a swept option (`tensorflow.keras`) applies to its backend only
            swept = {k.split(".", 1)[1]: v for k, v in point.items() if k.split(".", 1)[0] == backend and "." in k}
            options = {**scenario.options.get(backend, {}), **swept}
            options = known.validate_options(options) if known else dict(options)
            # another backend's option sweep does not repeat this backend's runs (a repeated value does)
            own = tuple(i for k, i in zip(keys, index) if "." not in k or k.split(".", 1)[0] == backend)
            if (backend, own) in planned:
                continue
            planned.add((backend, own))
            for device in devices or scenario.devices:
                configurations.append(
                    RunSpec(
                        run_id=new_id(),
                        session_id=session_id,
                        run_key=run_key(scenario.name, scenario.workload, backend, device, params, options),
                        scenario=scenario.name,
                        workload=scenario.workload,
                        backend=backend,
                        device=device,
                        params=params,
                        measure=measure,
                        seed=scenario.seed,
                        options=options,
                        cpu_threads=scenario.cpu_threads.model_dump(),
                    )
                )
    return interleave(configurations, measure.process_bounds()[0], scenario.seed)


def one_replica_key(scenario: str, workload: str, backend: str, device: str, params: dict,
                    options: dict | None = None) -> str | None:
    """The run_key of the 1-replica configuration a data-parallel one (replicas > 1) is scaled against; None
    for a configuration that is not data-parallel. The plan orders by it and the runner looks the base up by it."""
    known = WORKLOADS.get(workload)
    if known is None or known.replicas_param is None or known.replicas(params) < 2:
        return None
    return run_key(scenario, workload, backend, device, {**params, known.replicas_param: 1}, options)


def bases_first(order: list[int], configurations: list[RunSpec]) -> list[int]:
    """`order` with every data-parallel configuration (replicas > 1) after the 1-replica configuration of the
    plan it is scaled against, which is pulled forward to just before it; the rest keeps its shuffled order.

    Used for the first round only: its records can then carry `scaling_efficiency` (the runner reads the
    base's median from the store as each run finishes). Later rounds stay fully shuffled.
    """
    index_of = {c.run_key: i for i, c in enumerate(configurations)}
    base_of = {}
    for i, spec in enumerate(configurations):
        key = one_replica_key(spec.scenario, spec.workload, spec.backend, spec.device, spec.params, spec.options)
        if key in index_of:
            base_of[i] = index_of[key]
    out: list[int] = []
    placed: set[int] = set()
    for i in order:
        if i in placed:
            continue
        base = base_of.get(i)
        if base is not None and base not in placed:
            out.append(base)
            placed.add(base)
        out.append(i)
        placed.add(i)
    return out


def interleave(configurations: list[RunSpec], processes: int, seed: int) -> list[RunSpec]:
    """`processes` runs of every configuration, in rounds, each round in its own seeded shuffled order.

    A B A B ...: the runs of one configuration are spread over the whole session, never bunched,
    so a machine that drifts (warms up, throttles, gets busier) moves every side alike. In the first
    round a data-parallel configuration follows its 1-replica base (bases_first).
    """
    rng = random.Random(seed)
    plan = []
    for replicate in range(max(1, processes)):
        order = list(range(len(configurations)))
        rng.shuffle(order)
        if replicate == 0:
            order = bases_first(order, configurations)
        for i in order:
            spec = configurations[i]
            plan.append(replace(spec, run_id=new_id(), replicate=replicate))
    return plan
