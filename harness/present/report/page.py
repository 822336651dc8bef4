"""The report's page: tables as Markdown and HTML, and the whole report as a self-contained HTML page
or a Markdown file linking the plots' PNG files."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field

#: A table cell longer than this is shortened; HTML keeps the whole text in a <details> element.
CELL_CHARS = 90


@dataclass
class Plot:
    """One figure of the report: its file name, title, PNG bytes and a caption."""

    slug: str
    title: str
    png: bytes
    caption: str = ""


@dataclass
class Section:
    """A titled part of the report: plots, tables (lists of display rows) and lines of text, in order."""

    title: str
    #: items: Plot, str (a skipped plot), ("table", rows[, cell limit]), ("text", str), ("list", [str])
    parts: list = field(default_factory=list)


def cell_text(value) -> str:
    """A table cell's text: a dash for None, on one line."""
    text = "-" if value is None else str(value)
    return text.replace("\n", " ")


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "\u2026"


#: What Markdown (GitHub's) reads as markup that would let a name or a note change the page: raw HTML (`<img ...>`),
#: links and images (`![p](http://...)`), a backslash that undoes an escape, a pipe that ends a table cell.
_MARKDOWN_ACTIVE = str.maketrans({c: "\\" + c for c in "\\<>[]|"})


def markdown_text(value) -> str:
    """Text shown as itself in Markdown: its markup characters backslash-escaped, so that a scenario named
    `<img src=x onerror=alert(1)>` or holding `![p](http://...)` is printed, never rendered or fetched."""
    return str(value).translate(_MARKDOWN_ACTIVE)


class Markdown(str):
    """Text that is Markdown harness made itself (a link, code): `markdown_table` writes it as it is."""


def markdown_table(rows: list[dict], limit: int | None = None) -> str:
    """Rows as a GitHub-flavoured Markdown table (columns in first-seen order, each cell `markdown_text`, column
    names with their pipes escaped).

    `limit`: cells longer than that many characters are shortened with an ellipsis.
    """
    if not rows:
        return "(no rows)"
    columns = list(dict.fromkeys(k for r in rows for k in r))

    def esc(value) -> str:
        if isinstance(value, Markdown):
            return str(value)
        text = cell_text(value)
        return markdown_text(_short(text, limit) if limit else text)

    # column names are harness's own (`ratio [95% CI]`): only a pipe would break them
    lines = ["| " + " | ".join(str(c).replace("|", "\\|") for c in columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(esc(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


#: A cell at most this long never wraps (a figure, a name, an id); a longer one wraps between words.
NOWRAP_CHARS = 24


def _html_cell(value, limit: int) -> str:
    text = cell_text(value)
    if len(text) <= NOWRAP_CHARS:
        return f"<td class='n'>{html.escape(text)}</td>"
    if len(text) <= limit:
        return f"<td>{html.escape(text)}</td>"
    full = html.escape(str(value))
    return (f"<td><details title=\"{html.escape(text, quote=True)}\"><summary>{html.escape(_short(text, limit))}"
            f"</summary><div class='full'>{full}</div></details></td>")


def _html_header(name) -> str:
    return html.escape(str(name)).replace("_", "_<wbr>")


def html_table(rows: list[dict], limit: int = CELL_CHARS) -> str:
    """Rows as an HTML table that fits the page: cells wrap, and a cell longer than `limit`
    characters shows its start, the whole text in a <details> element (and its title attribute)."""
    if not rows:
        return "<p>(no rows)</p>"
    columns = list(dict.fromkeys(k for r in rows for k in r))
    head = "".join(f"<th>{_html_header(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(_html_cell(r.get(c), limit) for c in columns) + "</tr>" for r in rows)
    return f"<div class='table'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; padding: 0 1em; max-width: 1400px; color: #222; }
.table { max-width: 100%; overflow-x: auto; }
table { border-collapse: collapse; margin: 0.5em 0 1.2em; font-size: 0.8em; max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.45em; text-align: left; vertical-align: top;
         overflow-wrap: break-word; }
th { background: #f3f3f3; }
td { max-width: 30em; }
td.n { white-space: nowrap; }
details summary { cursor: pointer; }
details .full { white-space: pre-wrap; margin-top: 0.3em; }
img { max-width: 100%; border: 1px solid #eee; }
figure { margin: 1em 0; }
.skipped { color: #777; font-style: italic; }
figcaption { color: #555; font-size: 0.9em; max-width: 70em; }
li { margin: 0.15em 0; overflow-wrap: anywhere; }
"""


def render_html(sections: list[Section], overview: list[str]) -> str:
    """The report as one self-contained HTML page (plots as base64 PNG data URIs)."""
    out = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'><title>harness report</title>",
           f"<style>{_CSS}</style></head><body>", "<h1>harness report</h1>"]
    out += [f"<p>{html.escape(line)}</p>" for line in overview]
    for section in sections:
        out.append(f"<h2>{html.escape(section.title)}</h2>")
        for part in section.parts:
            if isinstance(part, Plot):
                data = base64.b64encode(part.png).decode("ascii")
                out.append(f"<figure><img alt='{html.escape(part.title)}' src=\"data:image/png;base64,{data}\">"
                           f"<figcaption>{html.escape(part.caption)}</figcaption></figure>")
            elif isinstance(part, str):
                out.append(f"<p class='skipped'>{html.escape(part)}</p>")
            elif part[0] == "table":
                out.append(html_table(part[1], *part[2:]))
            elif part[0] == "list":
                if part[1]:
                    out.append("<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in part[1]) + "</ul>")
            else:
                out.append(f"<p>{html.escape(part[1])}</p>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def render_markdown(sections: list[Section], overview: list[str]) -> str:
    """The report as Markdown linking the PNG files written beside it (long cells shortened; the
    Warnings section and report.html hold every text in full)."""
    md = markdown_text  # every text a record or a scenario can carry is shown as itself
    out = ["# harness report", ""] + [md(line) + "  " for line in overview] + [""]
    for section in sections:
        out += [f"## {md(section.title)}", ""]
        for part in section.parts:
            if isinstance(part, Plot):
                out += [f"![{md(part.title)}]({part.slug}.png)", "", f"*{md(part.caption)}*", ""]
            elif isinstance(part, str):
                out += [f"*{md(part)}*", ""]
            elif part[0] == "table":
                out += [markdown_table(part[1], limit=2 * CELL_CHARS), ""]
            elif part[0] == "list":
                if part[1]:
                    out += [f"- {md(line)}" for line in part[1]] + [""]
            else:
                out += [md(part[1]), ""]
    return "\n".join(out).rstrip("\n") + "\n"

