"""Building blocks of validated data, shared by every layer: what reads a user's file, and the typed parts of a
record (no harness imports)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    PrivateAttr,
    WrapSerializer,
    field_validator,
    model_serializer,
    model_validator,
)


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


#: A figure as a record stores it: an int stays an int and a float a float, so a row read and written again is the
#: row it was (pydantic's smart union keeps the exact type; `float` alone would write `1` back as `1.0`).
Number = int | float


class FrozenDict(dict):
    """A dict that refuses changes: a record's params, options, api and notes, read-only once the record is made.

    It is a dict to everything that reads one (json, pandas, `isinstance(x, dict)`); a change is a new record."""

    __slots__ = ()

    def _refuse(self, *args, **kwargs):
        raise TypeError(f"{type(self).__name__} is read-only: make a changed copy (dict(it) | changes)")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self):
        return type(self), (dict(self),)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        import copy  # deferred: only a deep copy of a record needs it

        return type(self)(copy.deepcopy(dict(self), memo))


def frozen_mapping(value) -> FrozenDict:
    """A mapping as a FrozenDict (None as an empty one)."""
    return value if isinstance(value, FrozenDict) else FrozenDict(value or {})


def _as_list(value, handler):
    return list(handler(value))


def ListOf(item) -> Any:  # noqa: N802 - it names a type, as typing's List did
    """A list in a record: validated item by item, kept as a tuple (read-only), written back as a list."""
    return Annotated[tuple[item, ...], WrapSerializer(_as_list)]


#: A read-only mapping field of a model (validated as a dict, kept as a FrozenDict).
ReadOnlyMapping = Annotated[dict[str, Any], AfterValidator(frozen_mapping)]


class RecordPart(BaseModel):
    """A typed part of a stored record (its timing, environment, checks ...), immutable once made.

    A part declares, typed, the keys harness reads; every other key (a backend's own figure, a newer version's
    field) is kept as it came. Only the keys it was given are written back, in the order they came, so a row
    read and written again is the row it was, key for key: `to_dict()` is the JSON object, `updated()` a copy
    with some keys changed or added."""

    model_config = ConfigDict(frozen=True, extra="allow")

    #: the keys in the order they came (new keys of `updated` after them)
    _order: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _keep_order(cls, data, handler):
        part = handler(data)
        if isinstance(data, Mapping) and part is not data:
            part._order = tuple(data)
        return part

    @model_serializer(mode="wrap")
    def _in_order(self, handler):
        out = handler(self)
        if not self._order or not isinstance(out, dict):
            return out
        rank = {key: i for i, key in enumerate(self._order)}
        return dict(sorted(out.items(), key=lambda item: rank.get(item[0], len(rank))))

    @classmethod
    def of(cls, value) -> Self:
        """The part from its JSON object (or itself; None: an empty part)."""
        if isinstance(value, cls):
            return value
        return cls.model_validate(value if value is not None else {})

    def to_dict(self) -> dict[str, Any]:
        """The part's JSON object: the keys it was given, in their order."""
        return self.model_dump(exclude_unset=True)

    def updated(self, **changes) -> Self:
        """A copy with some keys set (validated again; a new key goes last)."""
        return type(self).model_validate({**self.to_dict(), **changes})

    def __bool__(self) -> bool:
        return bool(self.model_fields_set) or bool(self.__pydantic_extra__)

    def __contains__(self, key: str) -> bool:
        """Whether the part holds `key` (given, declared or not)."""
        return key in self.model_fields_set or key in (self.__pydantic_extra__ or {})

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]  # its extra keys may hold lists
