"""`harness list`: bundled scenarios, workloads (with the package each comes from) and backends (installed or not,
with versions)."""

from __future__ import annotations

import click

from harness.commands.lines import echo_wrapped
from harness.scenario.bundled import bundled_scenarios
from harness.scenario.reading import read_scenario_documents
from harness.seam.backend import BROKEN, available_backends
from harness.workloads import BROKEN as BROKEN_WORKLOADS
from harness.workloads import WORKLOADS


def _echo(lead: str, text: str) -> None:
    echo_wrapped(text, lead)


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
            _echo(f"  {path.stem:<20} ", f"(unreadable: {exc})")
            continue
        if len(documents) == 1:
            _echo(f"  {path.stem:<20} ", _summary(documents[0]))
            continue
        # a file of several scenarios (one session): each document on its own line
        workloads = ", ".join(dict.fromkeys(str(d.get("workload", "?")) for d in documents))
        _echo(f"  {path.stem:<20} ", f"{len(documents)} scenarios in one session ({workloads}):")
        for document in documents:
            _echo(f"  {'':<20}   ", _summary(document))
    click.echo("Workloads:")
    for name, workload in WORKLOADS.items():
        _echo(f"  {name:<20} ", f"{workload.description} (from {WORKLOADS.source(name)})")
    for name, error in BROKEN_WORKLOADS.items():
        _echo(f"  {name:<20} ", f"failed to load: {error}")
    click.echo("Backends:")
    for name, backend in available_backends().items():
        version = backend.framework_version()
        state = f"installed, {version}" if version else "not installed"
        aliases = f" (also: {', '.join(backend.aliases)})" if backend.aliases else ""
        workloads = ", ".join(backend.workload_names())
        _echo(f"  {name:<20} ", f"{state}{aliases}; workloads: {workloads}")
    for name, error in BROKEN.items():
        _echo(f"  {name:<20} ", f"failed to load: {error}")
