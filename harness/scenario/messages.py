"""Validation errors as one line a user can act on: the file, each bad field's path, what was expected."""

from __future__ import annotations

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from harness.errors import InputError, did_you_mean


def known_fields(model, loc: tuple) -> list[str]:
    """The field names a pydantic `model` allows where `loc` (a field path, its last part the unknown
    name) ends: the fields of the model that the path's other parts lead to; [] where it leads to none."""
    for part in loc[:-1]:
        field = getattr(model, "model_fields", {}).get(part)
        model = getattr(field, "annotation", None) if field is not None else None
    return list(getattr(model, "model_fields", {}) or [])


def _describe(error: ErrorDetails, model=None) -> tuple[str, str]:
    # loc, msg, input and type are the keys pydantic gives every error (ErrorDetails declares them required)
    loc = ".".join(str(part) for part in error["loc"] if part not in ("function-after[_dims(), GemmParams]",))
    msg, value, kind = error["msg"], error["input"], error["type"]
    if kind == "extra_forbidden":
        path = tuple(error["loc"])
        msg = "unknown field" + (did_you_mean(path[-1], known_fields(model, path)) if model and path else "")
    elif kind == "missing":
        msg = "required field is missing"
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    if kind not in ("missing",) and not isinstance(value, dict):
        msg = f"{msg} (got {shown})"
    return loc, msg


def format_validation_error(exc: ValidationError, source: str, prefix: str = "", model=None) -> InputError:
    """One paragraph naming the file, each bad field's path and what was expected; an unknown field of
    `model` (the pydantic model validated) says which known field it is closest to."""
    parts = []
    first_field = None
    for error in exc.errors()[:8]:
        loc, msg = _describe(error, model)
        loc = f"{prefix}{loc}" if loc else prefix.rstrip(".") or "(top level)"
        first_field = first_field or loc
        parts.append(f"field `{loc}`: {msg}")
    more = len(exc.errors()) - 8
    if more > 0:
        parts.append(f"and {more} more")
    return InputError(f"{source}: " + "; ".join(parts), source=source, field=first_field)
