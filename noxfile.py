"""Test, lint and benchmark sessions. ``nox`` alone runs everything CI needs."""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "tests", "interop", "spark"]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True

PYTHON = "3.11"


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Sans-IO, network-layer, storage and coordinator tests (in-process, real sockets)."""
    session.install("-e", ".[test]")
    session.run("pytest", "-m", "not interop and not spark", *session.posargs)


@nox.session(python=PYTHON)
def interop(session: nox.Session) -> None:
    """End-to-end tests: the real broker driven by confluent-kafka, kafka-python, aiokafka, kcat."""
    session.install("-e", ".[test]")
    session.run("pytest", "-m", "interop", *session.posargs)


@nox.session(python=PYTHON)
def spark(session: nox.Session) -> None:
    """The PySpark analytics jobs over logs of a real broker run (needs Java 17)."""
    session.install("-e", ".[test,analytics]")
    session.run("pytest", "-m", "spark", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff and mypy."""
    session.install("-e", ".[dev,analytics]")
    session.run("ruff", "check", "trio_broker", "tests", "bench", "examples", "noxfile.py")
    session.run("mypy")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Throughput, latency, memory and start-up figures, as ratios against in-run baselines
    (``nox -s bench -- --only analytics``: the log analytics case, which needs pyspark)."""
    session.install("-e", ".[test,analytics]")
    session.run("python", "-m", "bench", *session.posargs)
