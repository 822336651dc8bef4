"""A figure on matplotlib's Agg canvas (no display, no pyplot state), as every plot of the report draws it: its
title over what varies and what is fixed, its legend outside the axes, and its PNG bytes."""

from __future__ import annotations

import contextlib
import io
import textwrap


def _wrap(text: str, width: int = 110) -> str:
    return "\n".join(textwrap.wrap(text, width)) or text


@contextlib.contextmanager
def plain_text():
    """Every text drawn meanwhile shown as written: no mathtext, no TeX. A scenario or variant name is the user's,
    and `cost $\\undefinedcmd{x}$` passed validate and then broke `harness report` with a ParseException (a pair
    of `$` in a name is text, not a formula)."""
    # deferred on purpose, as in figure()
    import matplotlib

    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        yield


def figure(width: float = 7.5, height: float = 4.5):
    """An empty figure of that size (inches) on its own Agg canvas."""
    # deferred on purpose: matplotlib is slow to import, and `harness compare` imports this package for its tables
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def png(fig) -> bytes:
    """The figure as PNG bytes (no software stamp, so the same figure gives the same bytes)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight", metadata={"Software": None})
    return buf.getvalue()


def title(ax, title: str, subtitle: str, width_in: float) -> None:
    """A bold title and, under it, what varies and what is fixed (wrapped to the figure's width); the
    title starts at the left edge of everything drawn (tick labels included), just above it."""
    chars = max(60, int(width_in * 15))
    ax.set_title(_wrap(subtitle, chars), loc="left", fontsize=8.5, color="#333")
    fig = ax.figure
    fig.canvas.draw()
    box = fig.get_tightbbox(fig.canvas.get_renderer())  # inches
    fig.text(box.x0 / fig.get_figwidth(), box.y1 / fig.get_figheight() + 0.012, title, ha="left", va="bottom",
             fontsize=11.5, fontweight="bold")


def legend_outside(ax, handles=None, labels=None) -> None:
    """The legend right of the axes, where it hides no data."""
    kwargs = dict(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    if handles is not None:
        ax.legend(handles, labels, **kwargs)
    else:
        ax.legend(**kwargs)
