"""`harness validate`: check a scenario file without running anything."""

from __future__ import annotations

import click

from harness.commands.lines import echo_wrapped, too_few_processes
from harness.scenario.load import DEFAULT_MAX_RUNS
from harness.session.app import prepare_session
from harness.session.count import count_plan
from harness.session.request import SessionRequest


@click.command("validate")
@click.argument("scenario_file")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a parameter.")
@click.option("--max-runs", type=click.IntRange(min=1), default=None, help=f"Largest plan accepted (default {DEFAULT_MAX_RUNS}).")
def command(scenario_file: str, overrides: tuple[str, ...], max_runs: int | None) -> None:
    """Validate SCENARIO_FILE: exit 0 if it is sound, 2 with the file, field and expectation if not.

    It plans the session as `harness run` would (the same code: every document, every sweep point,
    backend, device and worker process, counted against --max-runs) and writes nothing. A document whose
    processes are too few for compare to give a verdict is warned of (on standard error; still exit 0).
    """

    prepared = prepare_session(SessionRequest(scenario_file=scenario_file, overrides=overrides, max_runs=max_runs))
    path = prepared.scenario_path
    scenarios = {spec.scenario for _, specs in prepared.groups for spec in specs}
    for _, specs in prepared.groups:
        if not specs:
            continue
        first = specs[0]
        count = count_plan(specs)
        echo_wrapped(f"{path}: ok: {first.scenario} ({first.workload}), {count.configurations} configuration(s) x "
                     f"{count.processes} process(es) = {count.runs} run(s)", indent="  ")
        echo_wrapped(first.measure.describe(), "  ")
        warning = too_few_processes(specs)
        if warning:
            echo_wrapped(warning, "  ", indent="    ", err=True)
    if len(scenarios) > 1:
        total = count_plan(prepared.plan)
        echo_wrapped(f"{path}: {len(scenarios)} scenarios, {total.runs} run(s) in all", indent="  ")

