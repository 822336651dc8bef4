"""The `harness` command line. Each command lives in harness/commands/<name>.py.

Imports here are light on purpose: `harness --help` and `harness validate` import no framework.
"""

from __future__ import annotations

import sys

import click

from harness import __version__
from harness.errors import InputError

COMMANDS = ("run", "validate", "list", "env", "results", "compare", "report")


class _Group(click.Group):
    """Loads each command's module only when that command is used."""

    def list_commands(self, ctx):
        return list(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        import importlib

        return importlib.import_module(f"harness.commands.{name}").command

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except InputError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(2)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="harness")
def main() -> None:
    """Benchmark one framework-neutral scenario through PyTorch and TensorFlow/Keras.

    Exit codes: 0 every run ok (or unsupported), 1 some run failed, timed out, ran out of
    memory or diverged, 2 bad input.
    """


def run() -> None:  # console-script entry point
    sys.exit(main(standalone_mode=True))
