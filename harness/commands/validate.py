"""`harness validate`: check a scenario file without running anything."""

from __future__ import annotations

import click

from harness.spec.bundled import resolve_scenario_path
from harness.spec.scenario import DEFAULT_MAX_RUNS, count_points, load_scenarios
from harness.worker.measure import describe_measure, process_bounds


@click.command("validate")
@click.argument("scenario_file")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a parameter.")
@click.option("--max-runs", type=click.IntRange(min=1), default=None, help="Largest plan accepted (default 1000).")
def command(scenario_file: str, overrides: tuple[str, ...], max_runs: int | None) -> None:
    """Validate SCENARIO_FILE: exit 0 if it is sound, 2 with the file, field and expectation if not."""

    path = resolve_scenario_path(scenario_file)
    for scenario in load_scenarios(path, list(overrides), max_runs=max_runs or DEFAULT_MAX_RUNS):
        points = count_points(scenario)
        configurations = points * len(scenario.backends) * len(scenario.devices)
        measure = scenario.measure.model_dump()
        least, most = process_bounds(measure)
        runs = f"{configurations * least}" if least == most else f"{configurations * least}-{configurations * most}"
        click.echo(
            f"{path}: ok: {scenario.name} ({scenario.workload}), {points} sweep point(s) x "
            f"{len(scenario.backends)} backend(s) x {len(scenario.devices)} device(s) = {configurations} "
            f"configuration(s), {runs} run(s)\n  {describe_measure(measure)}"
        )
