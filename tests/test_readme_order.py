"""The README reads in the order a newcomer reads it: the pitch naming the three frameworks, the two
commands and what they give in its first 40 lines, then a worked example, then the reference; its prose
fits 100 columns and states what harness does, not what it did before."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")

#: Phrases that tell the reference's reader what harness used to do: that belongs in CHANGELOG.md.
HISTORY = ("did before", "no longer", "old meaning", "before, each", "used to", "as it was", "previously")


def _prose_lines() -> list[tuple[int, str]]:
    """(line number, line) of every line outside code blocks and tables."""
    lines, in_code = [], False
    for number, line in enumerate(README.splitlines(), 1):
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and not line.startswith("|"):
            lines.append((number, line))
    return lines


def test_the_first_40_lines_hold_the_pitch_the_two_commands_and_what_they_give():
    opening = "\n".join(README.splitlines()[:40])
    for framework in ("PyTorch", "TensorFlow/Keras", "JAX"):
        assert framework in opening, framework
    assert re.search(r"^make quickstart\b", opening, re.M) and re.search(r"^make test\b", opening, re.M)
    assert "## What you get" in opening and "ratio [95% CI]" in opening  # an excerpt of real output


def test_the_sections_come_in_a_newcomers_order():
    heads = [line[3:] for line in README.splitlines() if line.startswith("## ")]
    at = {name: i for i, name in enumerate(heads)}
    order = ["What you get", "A worked example", "Scenario files", "Result records", "Statistics", "Set-up"]
    assert [at[name] for name in order] == sorted(at[name] for name in order), heads


def test_prose_fits_100_columns():
    wide = [(number, len(line)) for number, line in _prose_lines() if len(line) > 100]
    assert wide == [], wide


def test_the_reference_states_facts_not_history():
    prose = " ".join(line for _, line in _prose_lines()).lower()
    said = [phrase for phrase in HISTORY if phrase in prose]
    assert said == [], said
