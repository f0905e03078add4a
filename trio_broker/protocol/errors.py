"""Reading error codes out of response bodies, for logs and ErrorsPerSec (sans-IO)."""

from __future__ import annotations

import dataclasses
from typing import Any

from kio.schema.errors import ErrorCode

_MAX_DEPTH = 4


def response_error(body: Any) -> str:
    """The top-level error of a response, or else the first non-zero nested one, or ``NONE``.

    Kafka's request log names one error per response; per-partition errors (Produce, Fetch) are
    what an operator looks for when the top level says nothing.
    """
    found = _first_error(body, 0)
    return found.name.upper() if found is not None else "NONE"


# Per message class: whether it has an error_code, and which fields hold nested entities.
_SHAPES: dict[type, tuple[bool, tuple[str, ...]]] = {}


def _shape(cls: type) -> tuple[bool, tuple[str, ...]]:
    shape = _SHAPES.get(cls)
    if shape is None:
        fields = dataclasses.fields(cls)
        nested = tuple(f.name for f in fields if "tuple[" in str(f.type) and "kafka_type"
                       not in f.metadata)
        shape = _SHAPES[cls] = (any(f.name == "error_code" for f in fields), nested)
    return shape


def _first_error(value: Any, depth: int) -> ErrorCode | None:
    shape = _SHAPES.get(value.__class__)  # known classes skip the dataclass check
    if shape is None:
        if depth > _MAX_DEPTH or not dataclasses.is_dataclass(value):
            return None
        shape = _shape(type(value))
    has_error, nested = shape
    if has_error:
        code = value.error_code
        if code != 0:
            return code if code.__class__ is ErrorCode else ErrorCode(code)
    if depth < _MAX_DEPTH:
        for name in nested:
            for item in getattr(value, name) or ():  # nullable arrays are None
                found = _first_error(item, depth + 1)
                if found is not None:
                    return found
    return None
