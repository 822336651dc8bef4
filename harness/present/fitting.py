"""A table fitted to the terminal's width (`COLUMNS`, else the terminal's width, else DEFAULT_WIDTH): a column
whose value is the same in every row moves to a header line above the table (`every row: device=cpu, ...`), a
column empty in every row is left out, long notes are shortened, and if it is still too wide the least needed
columns are left out, saying which: a caller states the order, least important first, so the figures that
answer go last. A warnings column becomes footnote marks (`[1]`) on the row's first cell, its text under the
table. `wide=True` prints everything."""

from __future__ import annotations

import re
import shutil
import textwrap
from dataclasses import dataclass, field

from harness.present.cells import cell

#: Width of a table printed where there is no terminal to ask and `COLUMNS` is not set (a pipe, a file).
DEFAULT_WIDTH = 120
#: A shortened column keeps at least this many characters before optional columns are left out ...
MIN_SHORTENED = 32
#: ... and at least this many once they are.
MIN_SHORTENED_HARD = 16
#: Between two columns.
GAP = "  "
#: Marks a shortened cell.
ELLIPSIS = "..."


def terminal_width() -> int:
    """`COLUMNS`, else the terminal's width, else DEFAULT_WIDTH (standard output is not a terminal)."""
    return max(20, shutil.get_terminal_size(fallback=(DEFAULT_WIDTH, 24)).columns)


@dataclass
class Fitted:
    """A table laid out for a width: the values every row shares, the text, and what was cut."""

    common: dict[str, str] = field(default_factory=dict)
    text: str = ""
    shortened: list[str] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)
    width: int = DEFAULT_WIDTH
    #: The footnotes' texts, `[1]` first: the warnings the rows' marks point to.
    notes: list[str] = field(default_factory=list)
    #: The warnings every row has: said once under the table, with no mark.
    shared: list[str] = field(default_factory=list)

    def footnotes(self) -> list[str]:
        """`every row: text` per shared warning, then `[1] text` per footnote, each wrapped to the width."""
        texts = [f"every row: {note}" for note in self.shared] + [f"[{i}] {note}" for i, note in
                                                                  enumerate(self.notes, 1)]
        return [textwrap.fill(text, width=max(20, self.width), subsequent_indent="    ", break_long_words=False)
                for text in texts]

    def footer(self) -> str | None:
        """The footnotes, then one line saying what the table does not show in full; None when neither."""
        parts = []
        if self.shortened:
            parts.append(f"{', '.join(self.shortened)} shortened")
        if self.hidden:
            parts.append(f"columns left out: {', '.join(self.hidden)}")
        lines = self.footnotes()
        if parts:
            text = f"({'; '.join(parts)} to fit {self.width} columns; --wide shows everything)"
            lines += textwrap.wrap(text, width=max(20, self.width), subsequent_indent=" ", break_long_words=False)
        return "\n".join(lines) or None


_NUMBER = re.compile(r"[-+<]?(\d[\d,]*)?\.?\d+(e[-+]?\d+)?%?")


def _right_aligned(cells: list[str]) -> bool:
    """Numbers (a cell led by one: `0.5 [0.4, 0.6]`, `0.62 GiB`, `5 vs 5`) align right, text left."""
    shown = [c for c in cells if c not in ("-", "")]
    return bool(shown) and all(_NUMBER.fullmatch(c.split(" ", 1)[0]) for c in shown)


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - len(ELLIPSIS))].rstrip() + ELLIPSIS


def _set_aside(columns: list[str], cells: dict, out: Fitted, *, keep, required, move: bool) -> None:
    """Leave out the columns empty in every row (but the `required`); with `move`, put a column (not kept
    or required) whose value is the same in every row into `out.common`."""
    for c in list(columns):
        values = cells[c]
        if c in required:
            continue
        if all(v in ("-", "") for v in values):
            columns.remove(c)
        elif move and c not in keep and len(set(values)) == 1:
            out.common[c] = values[0]
            columns.remove(c)


class _Widths:
    """The columns shown and their widths, as they are cut to fit a width."""

    def __init__(self, columns: list[str], cells: dict, width: int, shorten) -> None:
        self.columns, self.width = columns, width
        self.cells = cells
        #: a column's footnote marks, row by row: kept whole where its cells are shortened
        self.marks: dict[str, list[str]] = {}
        self.heads = {c: [c] for c in columns}
        self.full = {c: max(len(c), *(len(v) for v in cells[c])) for c in columns}
        self.sizes = dict(self.full)
        self.floors = dict(shorten) if isinstance(shorten, dict) else {c: MIN_SHORTENED_HARD for c in shorten}
        #: the spaces between two columns: GAP's, one where that keeps a column the table would leave out
        self.gap = len(GAP)

    def total(self) -> int:
        """The table's width at the current sizes."""
        return sum(self.sizes[c] for c in self.columns) + self.gap * (len(self.columns) - 1)

    def fits(self) -> bool:
        """Whether the table fits the width."""
        return self.total() <= self.width

    def cut(self, least: int | None) -> None:
        """Shorten the `shorten` columns in their order, each down to `least` (None: its own floor),
        until the table fits."""
        self.sizes.update(self.full)
        for c in self.floors:
            over = self.total() - self.width
            if over <= 0:
                return
            if c in self.columns:
                floor = max(len(c), self.floors[c] if least is None else max(least, self.floors[c]))
                self.sizes[c] = min(self.sizes[c], max(floor, self.sizes[c] - over))

    def fold_headers(self) -> None:
        """Put a header wider than its cells (`baseline median`) on two lines, split at the space that
        makes it narrowest: the column then takes its cells' width."""
        for c in self.columns:
            cells = max(len(v) for v in self.cells[c])
            splits = [(c[:i], c[i + 1:]) for i, ch in enumerate(c) if ch == " "]
            if len(c) <= cells or not splits:
                continue
            self.heads[c] = list(min(splits, key=lambda pair: max(map(len, pair))))
            self.full[c] = self.sizes[c] = max(cells, *map(len, self.heads[c]))

    def leave_out(self, names, out: Fitted) -> None:
        """Leave these columns out, saying so in `out.hidden`."""
        for c in names:
            if c in self.columns:
                self.columns.remove(c)
                out.hidden.append(c)


def _narrow(widths: _Widths, out: Fitted, optional, last_resort, keep=(), required=()) -> None:
    """Cut and leave out columns until the table fits: the `shorten` columns to MIN_SHORTENED, the `optional`
    columns out, the `shorten` columns to their floors, the `last_resort` columns out, then any column
    from the right (`_last_columns_out`). A header wider than its cells goes on two lines first; the gap between
    columns narrows to one space before the first `last_resort` column goes."""
    if not widths.fits():
        widths.fold_headers()
    widths.cut(MIN_SHORTENED)
    for c in optional:  # the least needed columns go before the notes shrink below MIN_SHORTENED
        if widths.fits():
            break
        if c in widths.columns:
            widths.leave_out([c], out)
            widths.cut(MIN_SHORTENED)
    widths.cut(None)
    for group in last_resort:  # a name, or names that go together (two sides of one figure)
        if widths.fits():
            break
        if widths.gap > 1:  # one space between columns before a column the caller ranks goes
            widths.gap = 1
            widths.cut(None)
            if widths.fits():
                break
        widths.leave_out([group] if isinstance(group, str) else group, out)
        widths.cut(None)
    _last_columns_out(widths, out, keep, required)
    out.shortened = [c for c in widths.columns if widths.sizes[c] < widths.full[c]]


def _last_columns_out(widths: _Widths, out: Fitted, keep, required) -> None:
    """Still too wide: leave out columns from the right until the table fits: the notes and warnings
    first (`--wide` and the record keep them), then those neither kept nor required (the later a
    setting, the less it tells rows apart), then the kept ones;
    the required columns stay, shortened to what is left, so the table never exceeds the width."""
    for pool in ([c for c in widths.floors if c in widths.columns and c not in required],  # notes, warnings
                 [c for c in widths.columns if c not in keep and c not in required],
                 [c for c in widths.columns if c not in required]):
        for c in reversed(pool):
            if widths.fits():
                return
            widths.leave_out([c], out)
            widths.cut(None)
    over = widths.total() - widths.width
    for c in reversed(widths.columns):  # only required columns are left: shorten them, the last first
        if over <= 0:
            break
        cut = min(over, widths.sizes[c] - min(len(ELLIPSIS) + 1, widths.sizes[c]))
        widths.sizes[c] -= cut
        over -= cut


def _aligned(widths: _Widths, n_rows: int) -> str:
    """The header (one or two lines) and rows, each cell shortened to its column's size, numbers right-aligned."""
    columns, cells, sizes = widths.columns, widths.cells, widths.sizes
    lines = []
    align = {c: _right_aligned(cells[c]) for c in columns}
    depth = max((len(widths.heads[c]) for c in columns), default=1)
    heads = [[(widths.heads[c] if len(widths.heads[c]) == depth else [""] * (depth - 1) + widths.heads[c])[i]
              for c in columns] for i in range(depth)]
    for row, values in enumerate(heads + [[cells[c][i] for c in columns] for i in range(n_rows)]):
        parts = []
        for c, v in zip(columns, values):
            mark = widths.marks[c][row - depth] if c in widths.marks and row >= depth else ""
            if mark and len(v) > sizes[c]:  # the text is cut, never its footnote mark
                v = _shorten(v[: -len(mark) - 1], max(1, sizes[c] - len(mark) - 1)) + " " + mark
            v = _shorten(v, sizes[c])
            parts.append(v.rjust(sizes[c]) if align[c] else v.ljust(sizes[c]))
        lines.append((" " * widths.gap).join(parts).rstrip())
    return "\n".join(lines)


def _mark(numbers: list[str]) -> str:
    """`[1]`, `[1,3]`, `[2-5]` (a run of three or more as a range); '' for none."""
    if not numbers:
        return ""
    values, parts = sorted(int(n) for n in numbers), []
    start = prev = values[0]
    for n in values[1:] + [None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        parts.append(str(start) if prev == start else f"{start},{prev}" if prev == start + 1 else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return f"[{','.join(parts)}]"


def _footnoted(columns: list[str], cells: dict, footnotes, out: Fitted) -> list[str]:
    """Take the `footnotes` columns out of the table: each distinct warning (a cell holds them joined by
    `; `) becomes a footnote in `out.notes` (one every row has is said once, unmarked, in `out.shared`);
    returns each row's marks (`[1]`, `[1,2]`, or '')."""
    taken = [c for c in columns if c in footnotes]
    n_rows = len(cells[columns[0]]) if columns else 0
    per_row = [list(dict.fromkeys(t for c in taken for t in cells[c][i].split("; ") if t.strip() and t != "-"))
               for i in range(n_rows)]
    out.shared = [t for t in per_row[0] if all(t in texts for texts in per_row)] if n_rows > 1 else []
    marks = []
    for texts in per_row:
        numbers = []
        for text in (t for t in texts if t not in out.shared):
            if text not in out.notes:
                out.notes.append(text)
            numbers.append(str(out.notes.index(text) + 1))
        marks.append(_mark(numbers))
    for c in taken:
        columns.remove(c)
    return marks


def fit(rows: list[dict], *, width: int | None = None, wide: bool = False, keep=(), required=(),
        shorten=("notes", "warnings"), optional=(), last_resort=(), move: bool = True, footnotes=(),
        marked: str | None = None) -> Fitted:
    """Lay `rows` out for `width` columns (default: terminal_width()).

    Not `wide`: columns empty in every row are left out (except the `required` ones); with `move`,
    a column (not in `keep` or `required`) whose value is the same in every row goes to `common`;
    the `shorten` columns are cut to fit in their order (each to at least MIN_SHORTENED
    characters); then the `optional` columns are left
    out in their order, and the `shorten` columns cut further, to their own floor (`shorten` may map
    each to its floor; MIN_SHORTENED_HARD otherwise), and last the `last_resort` columns (or groups
    of columns) left out, until the table fits. The `footnotes` columns become marks on each row's cell
    of column `marked` (default: the first) with their text under the table (Fitted.footer). `wide`: every
    column in full.
    """
    width = terminal_width() if width is None else int(width)
    out = Fitted(width=width)
    if not rows:
        out.text = "(no results)"
        return out
    columns = list(dict.fromkeys(k for row in rows for k in row))
    cells = {c: [cell(row.get(c)) if not isinstance(row.get(c), str) else row.get(c) for row in rows] for c in columns}
    marks = _footnoted(columns, cells, footnotes, out) if not wide else []
    if not wide:
        _set_aside(columns, cells, out, keep=keep, required=required, move=move)
    at = (marked if marked in columns else columns[0]) if any(marks) and columns else None
    if at is not None:
        cells[at] = [f"{v} {m}" if m else v for v, m in zip(cells[at], marks)]
    widths = _Widths(columns, cells, width, shorten)
    widths.marks = {at: marks} if at is not None else {}
    if not wide:
        _narrow(widths, out, optional, last_resort, keep, required)
    out.text = _aligned(widths, len(rows))
    return out


def wrap(items: list[str], width: int | None = None, *, lead: str = "", sep: str = ", ") -> str:
    """`lead` and the items joined by `sep`, wrapped to the width between items (an item is never
    split: `device name=AMD EPYC` stays whole), continuation lines indented."""
    width = max(20, terminal_width() if width is None else width)
    lines, line = [], lead
    for i, item in enumerate(items):
        piece = item + (sep.rstrip() if i < len(items) - 1 else "")
        if line.strip() and len(line) + len(piece) > width:
            lines.append(line.rstrip())
            line = "  "
        line += piece + (" " if i < len(items) - 1 else "")
    lines.append(line.rstrip())
    return "\n".join(lines)


def describe(common: dict, width: int | None = None, *, lead: str = "every row: ") -> str | None:
    """`every row: key=value, ...` wrapped to the width, or None when nothing is common."""
    if not common:
        return None
    return wrap([f"{k}={v}" for k, v in common.items()], width, lead=lead)


def render(rows: list[dict]) -> str:
    """Rows as an aligned text table, every column in full (left-aligned text, right-aligned numbers)."""
    return fit(rows, wide=True).text
