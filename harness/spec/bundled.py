"""The scenario files bundled with harness (the repository's scenarios/ folder)."""

from __future__ import annotations

import sys
from pathlib import Path


def scenarios_dir() -> Path | None:
    """Where the bundled scenarios are: the source tree's scenarios/, or share/harness/scenarios."""
    for candidate in (
        Path(__file__).resolve().parents[2] / "scenarios",
        Path(sys.prefix) / "share" / "harness" / "scenarios",
    ):
        if candidate.is_dir():
            return candidate
    return None


def bundled_scenarios() -> list[Path]:
    """Every bundled scenario file, sorted by name."""
    folder = scenarios_dir()
    return sorted(folder.glob("*.yaml")) if folder else []


def resolve_scenario_path(text: str) -> str:
    """A path as given if it exists, else the bundled scenario of that name (`quickstart`), else as given."""
    path = Path(text)
    if path.exists():
        return text
    folder = scenarios_dir()
    if folder is not None:
        for name in (text, f"{text}.yaml"):
            if (folder / name).is_file() and "/" not in text:
                return str(folder / name)
    return text
