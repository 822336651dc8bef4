"""A click choice that answers a mistyped value with the closest allowed one."""

from __future__ import annotations

import click

from harness.errors import did_you_mean


class Choice(click.Choice):
    """click.Choice whose refusal names the closest choice: `--format jsn: ...; did you mean `json`?`."""

    def convert(self, value, param, ctx):
        """The chosen value; a usage error (exit 2) naming the choices and the closest of them if none matches."""
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as exc:
            hint = did_you_mean(value, self.choices)
            if not hint:
                raise
            self.fail(f"{exc.message.rstrip('.')}{hint}", param, ctx)
