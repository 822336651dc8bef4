"""`harness list`: bundled scenarios, workloads and backends (installed or not, with versions)."""

from __future__ import annotations

import click


@click.command("list")
def command() -> None:
    """List bundled scenarios, workloads, and backends with their framework versions."""
    from harness.backend import BROKEN, available_backends
    from harness.bundled import bundled_scenarios
    from harness.scenario import read_scenario_file
    from harness.workloads import WORKLOADS

    click.echo("Scenarios:")
    for path in bundled_scenarios():
        try:
            data = read_scenario_file(path)
            summary = f"{data.get('workload', '?')}: {data.get('description', '') or ''}".strip()
        except Exception as exc:  # a broken bundled file is shown, not fatal
            summary = f"(unreadable: {exc})"
        click.echo(f"  {path.stem:<20} {summary}")
    click.echo("Workloads:")
    for name, workload in WORKLOADS.items():
        click.echo(f"  {name:<20} {workload.description}")
    click.echo("Backends:")
    for name, backend in available_backends().items():
        version = backend.framework_version()
        state = f"installed, {version}" if version else "not installed"
        aliases = f" (also: {', '.join(backend.aliases)})" if backend.aliases else ""
        workloads = ", ".join(sorted(backend.workloads))
        click.echo(f"  {name:<20} {state}{aliases}; workloads: {workloads}")
    for name, error in BROKEN.items():
        click.echo(f"  {name:<20} failed to load: {error}")
