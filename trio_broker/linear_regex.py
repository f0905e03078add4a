"""Regular expressions from clients, matched as Kafka matches them: with RE2 (Kafka uses RE2/J,
``com.google.re2j``, for KIP-848 regex subscriptions and KIP-1152's transactional-id pattern).

RE2 matches in time linear in the text. Python's backtracking ``re`` would let one client's
pattern such as ``(a+)+$`` against a name ``aaaa…ab`` hold the whole broker (every connection
shares one event loop) for hours. RE2's syntax is RE2/J's: no backreferences or look-around,
which both refuse as invalid patterns.
"""

from __future__ import annotations

import functools
from typing import Any

import re2

#: Raised by :func:`compiled` for a pattern RE2 refuses.
RegexError = re2.error

# Errors go to the client and the log, not to RE2's own stderr logging.
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False


@functools.lru_cache(maxsize=1024)
def compiled(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (cached: clients repeat their patterns); raises
    :data:`RegexError` when it is not a valid pattern."""
    return re2.compile(pattern, _OPTIONS)


def regex_error_message(exc: Exception) -> str:
    """RE2's reason for refusing a pattern, as text."""
    reason = exc.args[0] if exc.args else exc
    return reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
