"""`harness results-page`: regenerate docs/results.md from the stores its manifest lists."""

from __future__ import annotations

from pathlib import Path

import click

from harness.present.results_page import build_page

#: The manifest and the page of the repository, where the command is run from its root.
MANIFEST = "docs/data/manifest.yaml"
PAGE = "docs/results.md"
#: The command as the page names it.
COMMAND = "harness results-page"


@click.command("results-page")
@click.option("--manifest", "manifest", default=MANIFEST, show_default=True, metavar="FILE",
              help="The stores' manifest (YAML); the stores lie beside it.")
@click.option("--output", "-o", "output", default=PAGE, show_default=True, metavar="FILE",
              help="The page to write; the commentary already in it is kept.")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if the page differs from what the stores give.")
def command(manifest, output, check) -> None:
    """Regenerate the results page from the stores its manifest lists (commentary kept; --check: exit 1 if stale)."""

    text = build_page(manifest, output, COMMAND)
    path = Path(output)
    if check:
        if not path.is_file() or path.read_text() != text:
            click.echo(f"{output} is not what `{COMMAND}` makes from {manifest}: run it", err=True)
            raise SystemExit(1)
        click.echo(f"{output} is current")
        return
    path.write_text(text)
    click.echo(f"wrote {output} from {manifest}")
