"""Building blocks of validated input, shared by every layer that reads a user's file (no harness imports)."""

from __future__ import annotations

from pydantic import BaseModel, field_validator


def _admits(annotation, kinds: tuple) -> bool:
    """Whether a field's type admits one of `kinds` (itself, or a union or Literal holding one)."""
    import typing

    if annotation in kinds:
        return True
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Literal:
        return any(type(a) in kinds for a in args)
    return any(_admits(a, kinds) for a in args)


class NumbersNotBooleans(BaseModel):
    """A model whose numeric fields refuse booleans: pydantic would take `size: true` as size 1 (bool is
    an int subclass). Workload parameters and the scenario's own blocks build on it."""

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value, info):
        if isinstance(value, bool):
            field = cls.model_fields.get(info.field_name) if info.field_name else None
            if field is not None and _admits(field.annotation, (int, float)) and not _admits(field.annotation, (bool,)):
                raise ValueError("expected a number, not a boolean")
        return value
