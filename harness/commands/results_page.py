"""`harness results-page`: regenerate docs/results.md from the stores its manifest lists."""

from __future__ import annotations

from pathlib import Path

import click

from harness.present.results_page import build_page, with_stores_table

#: The manifest and the page of the repository, where the command is run from its root.
MANIFEST = "docs/data/manifest.yaml"
PAGE = "docs/results.md"
#: The methodology page, beside the results page, whose stores table the command fills too (its
#: `<!-- generated:stores -->` block).
METHODS = "benchmarks.md"
#: The command as the page names it.
COMMAND = "harness results-page"


@click.command("results-page")
@click.option("--manifest", "manifest", default=MANIFEST, show_default=True, metavar="FILE",
              help="The stores' manifest (YAML); the stores lie beside it.")
@click.option("--output", "-o", "output", default=PAGE, show_default=True, metavar="FILE",
              help="The page to write; the commentary already in it is kept.")
@click.option("--stores-table-in", "methods", default=None, metavar="FILE",
              help="Another page whose <!-- generated:stores --> block gets the stores table (default: "
                   f"{METHODS} beside the results page; skipped where it has no such block).")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if the page differs from what the stores give.")
def command(manifest, output, methods, check) -> None:
    """Regenerate the results page from the stores its manifest lists (commentary kept; --check: exit 1 if stale)."""

    pages = {Path(output): build_page(manifest, output, COMMAND)}
    methods = methods or str(Path(output).parent / METHODS)
    table_page = with_stores_table(manifest, methods)
    if table_page is not None:
        pages[Path(methods)] = table_page
    if check:
        stale = [str(p) for p, text in pages.items() if not p.is_file() or p.read_text() != text]
        if stale:
            click.echo(f"{', '.join(stale)}: not what `{COMMAND}` makes from {manifest}: run it", err=True)
            raise SystemExit(1)
        click.echo(f"{', '.join(str(p) for p in pages)}: current")
        return
    for path, text in pages.items():
        path.write_text(text)
    click.echo(f"wrote {', '.join(str(p) for p in pages)} from {manifest}")
