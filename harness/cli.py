"""The `harness` command line. Each command lives in harness/commands/<name>.py.

Imports here are light on purpose: `harness --help` and `harness validate` import no framework.
"""

from __future__ import annotations

import difflib
import importlib
import signal
import sys

import click

from harness import __version__
from harness.errors import InputError
from harness.present.pipe import guard_stdout
from harness.worker.exit import exit_now

#: Each command and the line `harness --help` shows for it, so that listing the commands imports none of them
#: (a test checks each line against its command's own help).
COMMANDS = {
    "run": "Run SCENARIO_FILE (a path, or the name of a bundled scenario such as `quickstart`).",
    "validate": "Validate SCENARIO_FILE: exit 0 if it is sound, 2 with the file, field and expectation if not.",
    "list": "List bundled scenarios, workloads, and backends with their framework versions.",
    "env": "Show python, the frameworks and plugins installed, CUDA driver, GPU and CPU details and the machine's load.",
    "results": "Print or export the stored results (json: an array of result records), list the sessions (--sessions), "
               "or --import some.",
    "tune": "Tune SCENARIO_FILE: each framework's fastest configuration of its sweep, by racing over processes.",
    "compare": "Compare stored results: ratio to a baseline, its 95% CI, Mann-Whitney p-value and a verdict.",
    "report": "Write DIR/report.html (self-contained) and DIR/report.md with PNG plots beside it.",
    "results-page": "Regenerate the results page from the stores its manifest lists (commentary kept; --check: "
                    "exit 1 if stale).",
}


class _Group(click.Group):
    """Loads each command's module only when that command is used; the list of commands imports none."""

    def list_commands(self, ctx):
        return list(COMMANDS)

    def format_commands(self, ctx, formatter):
        # each line whole, wrapped to the terminal (click's short help would cut it at the first line's end)
        with formatter.section("Commands"):
            formatter.write_dl(list(COMMANDS.items()))

    def resolve_command(self, ctx, args):
        name = click.utils.make_str(args[0])
        if name not in COMMANDS and not name.startswith("-"):
            close = difflib.get_close_matches(name, COMMANDS, n=1)
            hint = f" Did you mean {close[0]}?" if close else ""
            ctx.fail(f"No such command {name!r}.{hint} (`harness --help` lists them.)")
        return super().resolve_command(ctx, args)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        return importlib.import_module(f"harness.commands.{name.replace('-', '_')}").command

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

    \b
    Exit codes:
      0    every run ok (an unsupported run beside ok ones is an answer)
      1    a run failed, timed out, ran out of memory or diverged; the store
           failed mid-session; compare --fail-if-slower found a regression
      2    bad input (file, field, flag), before anything runs
      3    no run ok and none failed: every run was unsupported (such as
           --device cuda:0 without a GPU), so nothing was measured
      75   run --time-limit reached: runs left unstarted (none cut short);
           the message gives the --resume command
      130  interrupted by SIGINT (Ctrl-C), 143 by SIGTERM, 129 by SIGHUP (its
           terminal closed): finished runs are kept and the message gives
           the --resume command
    """


def run() -> None:
    """The console script's and `python -m harness`'s entry point.

    Where Arrow was loaded (the parquet export; pandas' pyarrow-backed strings), the process leaves
    without interpreter teardown once the command is done: Arrow's thread pools can abort the
    teardown ("terminate called without an active exception", exit -6) after the work is written
    (apache/arrow#34314). Everything harness writes is closed by then.
    """
    sys.stdout = guard_stdout(sys.stdout)  # `| head` ends with the command's own exit code, not click's 1
    try:
        main(standalone_mode=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    failed = getattr(sys.stdout, "write_error", None)
    if failed is not None:  # `> /dev/full`: the output asked for is incomplete, which is a failure, said in a line
        print(f"error: standard output could not be written ({failed.strerror}): what it holds is incomplete",
              file=sys.stderr)
        code = code or 1
    # the command is done and its results are stored: a Ctrl-C now must not turn its exit code into a
    # KeyboardInterrupt raised somewhere in interpreter teardown
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if "pyarrow" in sys.modules:
        exit_now(code)
    sys.exit(code)
