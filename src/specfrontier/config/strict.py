"""The base of every config model: unknown keys refused, frozen, and no value coerced into another type.

Why strict: pydantic's default ("lax") mode converts what it can, so `concurrency: [true]` measured
C = 1, `["4"]` measured C = 4 and `max_tokens: 48.0` ran with 48, each without a word (issue 39). A YAML
file already has types (`4` is a number, `"4"` a string, `true` a boolean), so a value of the wrong type
is a mistake to name (`concurrency[0] = True: Input should be a valid integer; fix: ...`), not to guess.

Strict mode would also refuse the shapes YAML or JSON cannot write: a tuple (they have lists), a `Path`
(they have strings), and, in JSON (a run's stored config and parameters), a mapping with whole-number
keys (JSON keys are strings: `{"1": 4}`). `_yaml_shapes` turns exactly those back, by each field's
declared type, before the strict check; nothing else is converted.
"""

from __future__ import annotations

import types
from pathlib import Path, PurePath
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

_ARMS: dict[int, tuple[Any, tuple[Any, ...]]] = {}
"""`_arms` by the id of the annotation object, which the entry holds (so its id is never reused): field
annotations may hold unhashable metadata, so they cannot key a dict themselves."""


def _arms(annotation: Any) -> tuple[Any, ...]:
    """The alternatives of a declared type: `X | None` -> (X, None); Annotated metadata dropped."""
    known = _ARMS.get(id(annotation))
    if known is None:
        known = _ARMS[id(annotation)] = (annotation, _alternatives(annotation))
    return known[1]


def _alternatives(annotation: Any) -> tuple[Any, ...]:
    origin = get_origin(annotation)
    if origin is Annotated:
        return _arms(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return tuple(arm for a in get_args(annotation) for arm in _arms(a))
    return (annotation,)


def _whole(key: object) -> bool:
    return isinstance(key, str) and key.removeprefix("-").isdigit()


def _shaped(value: Any, annotation: Any) -> Any:
    """`value` with the shapes YAML and JSON cannot write turned into the ones `annotation` declares:
    lists into tuples, strings into paths, whole-number JSON keys into ints, at any depth of tuples,
    lists and mappings; anything else as it is (a nested model validates its own fields)."""
    for arm in _arms(annotation):
        origin, args = get_origin(arm), get_args(arm)
        if origin is tuple and isinstance(value, list | tuple):
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(_shaped(v, args[0]) for v in value)
            if len(args) == len(value):
                return tuple(_shaped(v, a) for v, a in zip(value, args, strict=True))
            return tuple(value)  # the wrong length: the strict check names it
        if origin is list and isinstance(value, list) and args:
            return [_shaped(v, args[0]) for v in value]
        if origin is dict and isinstance(value, dict) and len(args) == 2:
            key_type, item_type = args
            return {(int(k) if key_type is int and _whole(k) else k): _shaped(v, item_type) for k, v in value.items()}
        if isinstance(value, str) and isinstance(arm, type) and issubclass(arm, PurePath):
            return Path(value)
    return value


class StrictModel(BaseModel):
    """A config block: unknown keys are refused (a typo is an error), values are never coerced into
    another type (strict mode), and the model is frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    @field_validator("*", mode="before")
    @classmethod
    def _yaml_shapes(cls, value: Any, info: ValidationInfo) -> Any:
        """A list where the field holds a tuple, a string where it holds a path, a whole number written as
        a JSON key where it holds a mapping keyed by numbers: what YAML and JSON (a stored config) write
        for them. Their items are still checked strictly."""
        if info.field_name is None:
            return value
        annotation: Any = cls.model_fields[info.field_name].annotation
        return _shaped(value, annotation)


__all__ = ["StrictModel"]
