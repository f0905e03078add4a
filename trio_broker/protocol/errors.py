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


def _first_error(value: Any, depth: int) -> ErrorCode | None:
    if depth > _MAX_DEPTH or not dataclasses.is_dataclass(value):
        return None
    code = getattr(value, "error_code", None)
    if isinstance(code, ErrorCode) and code is not ErrorCode.none:
        return code
    for field in dataclasses.fields(value):
        child = getattr(value, field.name)
        if isinstance(child, tuple):
            for item in child:
                found = _first_error(item, depth + 1)
                if found is not None:
                    return found
    return None
