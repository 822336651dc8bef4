"""`harness compare --breakdown` as text: each compared side's profile classes beside its baseline's, in
milliseconds per step, with the difference and a bar of it, laid out for the terminal's width."""

from __future__ import annotations

import json

from harness.present.fitting import describe, terminal_width, wrap
from harness.results.compare.breakdown import Pair

#: Below this width the shares of the step are left out (the milliseconds and the difference stay).
SHARES_FROM = 100
#: The narrowest layout: class, both sides' ms, the difference, and a bar of at least a few characters.
NARROWEST = 56


def _bar(diff: float, largest: float, room: int) -> str:
    """The difference as a bar: `+####` (the side spends more), `-##` (less), scaled to the largest."""
    if largest <= 0 or room < 2:
        return ""
    n = round(abs(diff) / largest * (room - 1))
    return ("+" if diff > 0 else "-") + "#" * n if n else ""


def _row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()


def pair_lines(pair: Pair, width: int) -> list[str]:
    """One pair's lines: where, the sentence, then a row per class and idle, and the profiled and timed step."""
    shares = width >= SHARES_FROM
    head = ["class", "baseline ms", "side ms", "diff ms"] + (["baseline %", "side %"] if shares else [])
    widths = [11, 11, 9, 9] + ([10, 7] if shares else [])
    room = width - sum(widths) - 2 * len(widths)
    largest = max(abs(pair.diff_ms(p)) for p in pair.parts)
    base_step, side_step = pair.baseline.step_ms, pair.value.step_ms
    lines = [describe(pair.where, width, lead="where: ") or "where: (every field compared)",
             wrap(pair.sentence().split(" "), width, sep=" ")]
    lines.append(_row(head, widths))
    for part in pair.parts:
        b, v = pair.baseline.ms[part], pair.value.ms[part]
        cells = [part, f"{b:.2f}", f"{v:.2f}", f"{pair.diff_ms(part):+.2f}"]
        if shares:
            cells += [f"{100 * b / base_step:.1f}" if base_step else "-",
                      f"{100 * v / side_step:.1f}" if side_step else "-"]
        lines.append((_row(cells, widths) + "  " + _bar(pair.diff_ms(part), largest, room)).rstrip())
    lines.append(_row(["step", f"{base_step:.2f}", f"{side_step:.2f}", f"{side_step - base_step:+.2f}"], widths[:4]))
    timed = [pair.baseline.timed_ms, pair.value.timed_ms]
    lines.append(_row(["timed step"] + [f"{t:.2f}" if t else "-" for t in timed], widths[:3]))
    return lines


def breakdown_text(pairs: list[Pair], fmt: str = "table", *, width: int | None = None) -> str:
    """The pairs as the terminal shows them (each line within `width`, the terminal's by default), or as
    JSON (`fmt` json)."""
    if fmt == "json":
        return json.dumps([p.as_dict() for p in pairs], indent=2, default=str) + "\n"
    width = max(NARROWEST, terminal_width() if width is None else width)
    blocks = ["\n".join(pair_lines(pair, width)) for pair in pairs]
    legend = wrap(["ms per step from each framework's own profiler (docs/profile.md)", "idle: covered by no kernel",
                   "step: the profiled step", "timed step: the record's step_time_s"], width, sep="; ")
    return "\n\n".join(blocks + [legend]) + "\n"
