"""Fixtures of the analytics tests: one SparkSession per test session, scenario log files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.analytics.analytics_logs import (
    FUTURE_LINE,
    MALFORMED_LINES,
    scenario,
    write_scenario,
)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local[2] SparkSession shared by every Spark test (start-up costs seconds)."""
    from trio_broker.analytics.jobs import get_spark

    session, created = get_spark()
    yield session
    if created:
        session.stop()


@pytest.fixture(scope="module")
def scenario_logs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """A three-minute scenario in a rotated log (several files) plus malformed lines."""
    directory = tmp_path_factory.mktemp("logs")
    path = directory / "broker.log"
    files = write_scenario(path, scenario(), max_bytes=16_000, backup_count=50)
    assert len(files) > 2, "the scenario must span rotated files"
    with path.open("a", encoding="utf-8") as live:
        live.write(MALFORMED_LINES[1] + "\n" + MALFORMED_LINES[2] + "\n")
        live.write(FUTURE_LINE + "\n")
    with files[0].open("a", encoding="utf-8") as oldest:
        oldest.write("\n" + MALFORMED_LINES[0] + "\n")  # a torn line, then a blank one
    return files
