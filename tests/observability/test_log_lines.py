"""The rendered log lines: compact JSON, one line per event whatever the values hold."""

from __future__ import annotations

import json
from typing import Any

from trio_broker.observability import log


def test_lines_are_ascii_and_split_only_at_their_ends(log_events: Any) -> None:
    # orjson writes non-ASCII characters as they are; U+2028, U+0085 and friends would then
    # split a line for Python's splitlines (and other readers). Such lines are escaped.
    odd = "a\u2028b\x85c\u2029d é \x1e"
    log.emit("request", api="Produce", client_id=odd, request_bytes=1)
    log.emit("request", api="Produce", client_id="plain", request_bytes=2**70)
    text = log_events.text()
    assert text.isascii()
    lines = text.splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["client_id"] == odd
    assert second["request_bytes"] == 2**70  # beyond orjson's 64 bits: rendered by json
    assert lines[1].startswith('{"api":"Produce","client_id":"plain"')
    assert first["timestamp"].endswith("Z") and len(first["timestamp"]) == len(
        "2026-03-14T09:01:00.123456Z")
