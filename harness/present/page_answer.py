"""The results page's answer and what keeps its tables honest: the first screen (each framework's fastest
path of a workload, with its ratio against the baseline's same path), the answer's prose, a template whose
figures the generator fills from the tables (so none can drift from them) and whose own words state no number,
and the marks of rows measured on another date, commit or machine than their neighbours."""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass

from harness.errors import InputError
from harness.results.compare import (
    ComparisonRow,
    backend_options,
    backend_variant,
    display_rows,
    field_value,
    fmt,
)
from harness.results.manifest import Manifest
from harness.results.record import Result

#: A figure of the answer's template: `{{TABLE | FIELD=VALUE, ... | COLUMN}}`, the COLUMN of the one row of
#: TABLE (a section's id, or `first-screen`) whose FIELDs hold those VALUEs, as the page's table shows it.
PLACEHOLDER = re.compile(r"\{\{\s*([a-z0-9-]+)\s*\|([^|{}]*)\|\s*([^{}]+?)\s*\}\}")
#: Names with digits the answer's own words may use: a model, a GPU, a Keras generation, the precisions. Any
#: other digit in the template's words is a figure that belongs in a placeholder.
NAMES_WITH_DIGITS = ("ResNet-50", "GPT-2", "H200", "H100", "Keras 3", "Keras 2", "amp_bf16", "amp_fp16", "bf16",
                     "fp16", "fp32", "tf32", "2**31")
#: The first screen's table, as placeholders name it.
FIRST_SCREEN = "first-screen"
#: The page's mark of a row measured apart from its table's other rows, in order of use.
MARKS = "abcdefghij"


@dataclass(frozen=True)
class Origin:
    """Where the records behind a row were measured: their dates, the commits of their stores, their GPUs."""

    dates: tuple[str, ...]
    commits: tuple[str, ...]
    gpus: tuple[str, ...]

    def describe(self) -> str:
        """`DATES, commit C, on GPU-UUID` as a footnote says it."""
        return (f"{', '.join(self.dates) or 'no date'}, commit {', '.join(self.commits)}, "
                f"on {', '.join(self.gpus) or 'a GPU not recorded'}")


def origin(records: list[tuple[str, Result]], manifest: Manifest) -> Origin:
    """The Origin of (store file, record) pairs: a GPU named by the first 12 characters of its UUID."""
    dates = sorted({r.started_at[:10] for _, r in records if r.started_at})
    commits = sorted({manifest.entry(f).commit or "not recorded" for f, _ in records})
    gpus = sorted({r.gpu_uuid()[:12] for _, r in records if r.gpu_uuid()})
    return Origin(tuple(dates), tuple(commits), tuple(gpus))


def _holds(record: Result, name: str, value) -> bool:
    """Whether a record holds a comparison row's match field: `backend` as the plain backend and `options` as
    its options apart from the defaults, where the row compares something else; any other field as compared."""
    if name == "backend":
        return value in (record.backend, backend_variant(record))
    if name == "options":  # the options apart from the defaults, as JSON (none: null)
        return backend_options(record) == (json.loads(value) if isinstance(value, str) else dict(value or {}))
    held = field_value(record, name)
    return held is None or str(held) == str(value)


def row_records(row: ComparisonRow, compared: list[str], records: list[tuple[str, Result]]):
    """The (store file, record) pairs of a comparison row: its match group's ok records of either side."""
    def matches(record: Result) -> bool:
        side = " / ".join(str(field_value(record, f)) for f in compared)
        if "backend" not in compared and not _holds(record, "options", row.fixed("options")):
            return False  # options belong to the backend: compared with it, else part of the match
        return side in (str(row.baseline), str(row.value)) and all(
            _holds(record, k, v) for k, v in row.where.items() if v is not None and k != "options")
    return [(f, r) for f, r in records if r.status == "ok" and matches(r)]


def marked(origins: list[Origin]) -> tuple[list[str], list[str]]:
    """(a mark per row, the lines under the table): rows whose origin is not the one most rows share (the first
    row's on a tie) get a letter, one per distinct origin, and a line saying where they were measured."""
    if len(set(origins)) < 2:
        return [""] * len(origins), []
    counts = {o: origins.count(o) for o in origins}
    usual = max(counts, key=lambda o: (counts[o], -origins.index(o)))
    letters: dict[Origin, str] = {}
    for o in origins:
        if o != usual and o not in letters:
            letters[o] = MARKS[len(letters) % len(MARKS)]
    notes = [f"{letter}: measured {o.describe()}; the unmarked rows {usual.describe()}." for o, letter in
             letters.items()]
    return [letters.get(o, "") for o in origins], notes


#: The mark of a capacity answer that a kernel's tensor-size bound stopped, not memory.
KERNEL_MARK = "(kernel)"
GIB = 1 << 30


def kernel_bound_answer(record: Result) -> bool:
    """Whether a capacity record's answer is the kernel's bound: it says so (`limited_by: kernel`), or, made before
    that rule, its first failing batch is the first whose largest tensor passes 2**31 elements, one past it."""
    checks = record.checks
    if record.metric != "max_batch_size" or record.median is None:
        return False
    bound = checks.kernel_bound_batch or checks.batch_past_2_31_elements
    return checks.limited_by == "kernel" or (bound is not None and checks.first_failing_batch_size == bound
                                             and int(record.median) == bound - 1)


def capacity_notes(records: list[Result]) -> list[str]:
    """The note under a capacity table with kernel-bound answers: what bounded them and the memory left."""
    bound = [r for r in records if r.status == "ok" and kernel_bound_answer(r)]
    if not bound:
        return []
    free = []
    for r in bound:
        memory = r.gpu_size()["memory_bytes"]
        held = r.checks.peak_reserved_bytes or r.peak_allocated_bytes
        if r.checks.memory_free_bytes is not None:
            free.append(r.checks.memory_free_bytes / GIB)
        elif memory is not None and held is not None:
            free.append((memory - held) / GIB)
    left = f"; {min(free):.0f}-{max(free):.0f} GiB of the GPU not in use at the answer's peak" if free else ""
    return [f"`{KERNEL_MARK}`: stopped by a kernel's bound, not by memory (`limited_by: kernel`): the first batch that "
            "failed is the first whose largest tensor passes 2**31 elements, which TensorFlow's GPU kernels cannot "
            f"index, and the batch one under it trained{left}. Records made before harness said so record "
            "`limited_by: memory`."]


def prose_digits(template: str) -> list[str]:
    """The numbers the template's own words state (outside placeholders and NAMES_WITH_DIGITS): none is allowed."""
    words = PLACEHOLDER.sub(" ", template)
    words = re.sub(r"<!--.*?-->", " ", words, flags=re.S)
    for name in sorted(NAMES_WITH_DIGITS, key=len, reverse=True):
        words = words.replace(name, " ")
    return re.findall(r"\S*\d\S*", words)


def fill(template: str, tables: dict[str, list[dict]], source: str) -> str:
    """The template with each placeholder replaced by its figure from `tables` (section id -> the rows the page
    shows, unformatted for markdown); InputError, naming `source`, for a number in the template's own words, a
    table the page has not, a row not matched exactly once, or a column the row has not."""
    stray = prose_digits(template)
    if stray:
        raise InputError(f"{source}: a figure in the answer's own words ({', '.join(stray[:3])}): write it as "
                         "{{TABLE | FIELD=VALUE | COLUMN}}, so that the generator fills it from its table",
                         source=source)

    def figure(match: re.Match) -> str:
        table, where, column = match.group(1), match.group(2), match.group(3)
        if table not in tables:
            raise InputError(f"{source}: {match.group(0)}: no table {table!r} (tables: {', '.join(tables)})",
                             source=source)
        wanted = dict(tuple(p.strip() for p in pair.split("=", 1)) for pair in where.split(",") if pair.strip())
        hits = [r for r in tables[table] if all(str(r.get(k)) == v for k, v in wanted.items())]
        if len(hits) != 1 or column not in hits[0]:
            why = f"{len(hits)} rows match" if len(hits) != 1 else f"no column {column!r}"
            raise InputError(f"{source}: {match.group(0)}: {why}; expected one row with that column",
                             source=source)
        return str(hits[0][column])

    return PLACEHOLDER.sub(figure, template)


#: The fields that name a path on the first screen, where a row has them; any other field that varies follows.
PATH_FIELDS = ("execution", "precision")


def rewrapped(text: str, width: int = 110) -> str:
    """Markdown prose whose figures were filled in, wrapped again: each paragraph, and each `- ` item of a list
    (its lines after the first indented by two), to `width` columns."""
    blocks = []
    for block in re.split(r"\n\s*\n", text.strip("\n")):
        items = re.split(r"\n(?=- )", block) if block.startswith("- ") else [block]
        blocks.append("\n".join(textwrap.fill(" ".join(item.split()), width, subsequent_indent="  " if
                                               item.startswith("- ") else "", break_on_hyphens=False)
                                 for item in items))
    return "\n\n".join(blocks) + "\n"


def _path(row: ComparisonRow, fields: list[str]) -> str:
    return ", ".join(str(row.fixed(f)) for f in fields if row.fixed(f) is not None) or "its only configuration"


def _best(rows: list[ComparisonRow], value) -> ComparisonRow:
    higher = rows[0].higher_is_better
    return (max if higher else min)(rows, key=lambda r: value(r) if value(r) is not None else
                                    (float("-inf") if higher else float("inf")))


def first_screen_rows(label: str, rows: list[ComparisonRow]) -> list[tuple[dict, ComparisonRow, bool]]:
    """The first screen's rows of one workload: the baseline's fastest path, then each other framework's fastest
    path with its ratio against the baseline on that same path: (the row as shown, its comparison row, whether
    it is the baseline's own)."""
    measured = [r for r in rows if r.value_median is not None and r.baseline_median is not None]
    if not measured:
        return []
    varying = list(PATH_FIELDS) + [f for f in dict.fromkeys(k for r in measured for k in r.where)
                                   if f not in ("scenario", *PATH_FIELDS) and len({repr(r.fixed(f)) for r in measured}) > 1]
    out = []
    base = _best(measured, lambda r: r.baseline_median)
    out.append(({"workload": label, "framework": base.baseline, "fastest path": _path(base, varying),
                 "median": f"{fmt(base.baseline_median)} {base.unit or ''}".strip(), "ratio [95% CI]": "baseline",
                 "p": "-", "verdict": "-", "processes": str(base.baseline_runs)}, base, True))
    for framework in dict.fromkeys(r.value for r in measured):
        best = _best([r for r in measured if r.value == framework], lambda r: r.value_median)
        _, (shown,) = display_rows([best])
        out.append(({"workload": label, "framework": framework, "fastest path": _path(best, varying),
                     "median": f"{shown['median']} {best.unit or ''}".strip(),
                     "ratio [95% CI]": f"{shown['ratio [95% CI]']} against {best.baseline} "
                                       f"{shown['baseline median']} on that path",
                     "p": shown["p"], "verdict": shown["verdict"], "processes": shown["processes"]}, best, False))
    return out
