"""The scenario files bundled with harness (the repository's scenarios/ folder)."""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

from harness.errors import InputError


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
    """A path as given if it exists, else the bundled scenario of that name (`quickstart`), else as given.

    A bare name that is neither a file nor a bundled scenario but is close to one (`quickstrat`) is
    refused here, naming the scenario it is closest to (InputError).
    """
    path = Path(text)
    if path.exists():
        return text
    folder = scenarios_dir()
    if folder is not None:
        for name in (text, f"{text}.yaml"):
            if (folder / name).is_file() and "/" not in text:
                return str(folder / name)
    close = closest_scenario(text)
    if close:
        raise InputError(f"{text}: no such file, nor a bundled scenario; did you mean `{close}`? "
                         "(`harness list` names the bundled scenarios)", source=text)
    return text


def closest_scenario(text: str) -> str | None:
    """The bundled scenario name closest to a mistyped bare name (difflib), or None."""
    if "/" in text or "\\" in text:
        return None
    names = [p.stem for p in bundled_scenarios()]
    close = difflib.get_close_matches(Path(text).stem, names, n=1, cutoff=0.7)
    return close[0] if close else None
