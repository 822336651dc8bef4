"""Writing the report: report.html, report.md and the plots' PNG files."""

from __future__ import annotations

import datetime as _dt
from collections import Counter
from pathlib import Path

from harness.errors import InputError
from harness.present.report.canvas import plain_text
from harness.present.report.page import Plot, render_html, render_markdown
from harness.present.report.sections import build_sections
from harness.present.report.shaping import device_label, versions
from harness.results.compare import as_results
from harness.results.record import Result
from harness.results.sessions import UnfinishedSession


def _overview(records: list[Result]) -> list[str]:
    sessions = list(dict.fromkeys(r.session_id for r in records))
    statuses = Counter(r.status for r in records)
    devices = sorted({device_label(r) for r in records if r.device})
    return [
        f"Generated {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')} from {len(records)} result(s)"
        f" ({', '.join(f'{n} {s}' for s, n in statuses.most_common())}).",
        f"Sessions: {', '.join(map(str, sessions))}.",
        f"Frameworks: {versions(records) or 'unknown'}. Devices: {', '.join(devices) or 'unknown'}.",
    ]


def write_report(records, output_dir: str | Path = "reports",
                 sessions: list[UnfinishedSession] | None = None) -> dict[str, Path]:
    """Write report.html, report.md and the plots' PNG files into output_dir; the paths written."""
    records = as_results(records)
    with plain_text():  # names are drawn as written, `$` included
        sections = build_sections(records, sessions)
    overview = _overview(records)
    folder = Path(output_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--output {folder}: cannot create the folder: {exc}", field="--output") from None
    written: dict[str, Path] = {}
    for section in sections:
        for part in section.parts:
            if isinstance(part, Plot):
                written[part.slug] = _write(folder / f"{part.slug}.png", part.png)
    written["html"] = _write(folder / "report.html", render_html(sections, overview).encode("utf-8"))
    written["markdown"] = _write(folder / "report.md", render_markdown(sections, overview).encode("utf-8"))
    return written


def _write(path: Path, data: bytes) -> Path:
    """`data` written to `path`; an OSError (a full disk, no permission) said in one line (InputError, naming the
    file), the file cut short removed: a 0-byte PNG was left beside a traceback."""
    try:
        path.write_bytes(data)
    except OSError as exc:
        try:
            path.unlink()
        except OSError:
            pass
        raise InputError(f"--output {path.parent}: cannot write {path.name}: {exc.strerror or exc}; the report is "
                         "incomplete", field="--output") from None
    return path

