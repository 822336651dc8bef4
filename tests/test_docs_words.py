"""What a user reads speaks of the product: no issue numbers, work-session ordinals, device budgets,
numbered calls or paths of the machine a page was written on, in the README, docs/ or the plugins' docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Words of how the project was made, not of the product, with what each is.
FORBIDDEN = {
    "an issue number": r"\bissues? ?#?\d+|\bissue\d+",
    "a work-session ordinal": r"\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth)[- ]session"
                              r"|\bsessions \d+(-\d+)?\b",
    "a numbered call": r"\bcalls? \d+\b",
    "a device budget": r"\bdevice[- ]time\b|\bbudget\b|\blent\b",
    "a path outside the repository": r"\.\./shared\b|(?<![\w.])/(root|work|home)/",
}


def user_pages() -> list[Path]:
    """The pages a user reads: README, docs/*.md (the results page too), each plugin's README and docs."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for plugin in sorted((ROOT / "plugins").iterdir()):
        pages += sorted(plugin.glob("*.md")) + sorted(plugin.glob("docs/**/*.md"))
    return pages


def offending_lines(text: str) -> list[tuple[int, str, str]]:
    """(line number, what it is, the line) for every line of `text` with a forbidden word."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for what, pattern in FORBIDDEN.items():
            if re.search(pattern, line, re.IGNORECASE):
                found.append((number, what, line.strip()))
    return found


def test_the_patterns_find_what_they_are_for():
    text = ("## Sixth session of 2026-11-30 (issue 17)\ncall 1: `harness run benchmarks/h200/issue5_capacity.yaml`\n"
            "Device time: 519 s left from the budget\nthrough `../shared/tools/tf-gpu`\n--store /root/out/a.db\n"
            "the earlier searches (sessions 2-4)\n")
    kinds = {what for _, what, _ in offending_lines(text)}
    assert kinds == set(FORBIDDEN)
    assert offending_lines("harness run --session ID; a session of 5 runs; the call stack; docs/data/x.db") == []


@pytest.mark.parametrize("page", user_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_user_page_speaks_of_the_product(page):
    assert offending_lines(page.read_text()) == []


def test_benchmark_files_are_named_by_what_they_measure():
    names = [p.name for p in (ROOT / "benchmarks").rglob("*") if p.is_file()]
    assert names and not [n for n in names if re.search(r"issue\d+", n, re.IGNORECASE)]
