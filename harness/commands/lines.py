"""Lines the commands print beside their tables: wrapped to the terminal, and the warning of a plan whose
processes are too few for a verdict."""

from __future__ import annotations

import textwrap

import click

from harness.present.fitting import terminal_width
from harness.results.compare.verdicts import INCONCLUSIVE, inconclusive_reason
from harness.seam.runspec import RunSpec


def echo_wrapped(text: str, lead: str = "", *, indent: str | None = None, err: bool = False) -> None:
    """`lead` then `text`, wrapped between words to the terminal's width ($COLUMNS, else the terminal's, else 120;
    at least 40), each later line indented by `indent` (default: under the text's first column)."""
    width = max(40, terminal_width())
    click.echo(textwrap.fill(text, width=width, initial_indent=lead,
                             subsequent_indent=" " * len(lead) if indent is None else indent,
                             break_long_words=False, break_on_hyphens=False), err=err)


def too_few_processes(specs: list[RunSpec]) -> str | None:
    """A warning where a configuration of `specs` may run fewer processes than a verdict needs (the rule compare
    applies: an exact Mann-Whitney test of that many a side cannot reach p < 0.05); None where all have enough."""
    least = min((spec.measure.process_bounds()[0] for spec in specs), default=None)
    reason = inconclusive_reason(least, least) if least else None
    if reason is None:
        return None
    why = reason.split(": ", 1)[1] if reason.startswith(f"{INCONCLUSIVE}: ") else reason
    return f"warning: measure.processes: {why} (compare calls a comparison of these runs alone {INCONCLUSIVE})"
