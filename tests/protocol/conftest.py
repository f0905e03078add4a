"""Fixtures of the protocol tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.decode_worker import DecodeWorker


@pytest.fixture(scope="module")
def decode_worker() -> Iterator[list[DecodeWorker]]:
    """A module's decoder process, in a one-element list so that a dead one can be replaced."""
    holder = [DecodeWorker()]
    yield holder
    holder[0].close()
