"""`harness list`: bundled scenarios, workloads and backends (installed or not, with versions)."""

from __future__ import annotations

import click

from harness.seam.backend import BROKEN, available_backends
from harness.spec.bundled import bundled_scenarios
from harness.spec.scenario import read_scenario_documents
from harness.workloads import WORKLOADS


def _summary(document: dict) -> str:
    return f"{document.get('workload', '?')}: {document.get('description', '') or ''}".strip()


@click.command("list")
def command() -> None:
    """List bundled scenarios, workloads, and backends with their framework versions."""

    click.echo("Scenarios:")
    for path in bundled_scenarios():
        try:
            documents = read_scenario_documents(path)
        except Exception as exc:  # a broken bundled file is shown, not fatal
            click.echo(f"  {path.stem:<20} (unreadable: {exc})")
            continue
        if len(documents) == 1:
            click.echo(f"  {path.stem:<20} {_summary(documents[0])}")
            continue
        # a file of several scenarios (one session): each document on its own line
        workloads = ", ".join(dict.fromkeys(str(d.get("workload", "?")) for d in documents))
        click.echo(f"  {path.stem:<20} {len(documents)} scenarios in one session ({workloads}):")
        for document in documents:
            click.echo(f"  {'':<20}   {_summary(document)}")
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
