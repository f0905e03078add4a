"""Test, lint and benchmark sessions. ``nox`` alone runs everything CI needs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import nox

# preflight first: a machine without kcat, Go, Chromium or Java 17 stops in seconds, not at the end.
nox.options.sessions = ["preflight", "lint", "tests", "interop", "spark"]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True

PYTHON = "3.11"


def _java_problem() -> str | None:
    """PySpark's launcher runs $JAVA_HOME/bin/java, else ``java`` on PATH; Spark 4 needs 17+."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        where = f"JAVA_HOME={home} has no bin/java" if home else "no java on PATH, JAVA_HOME unset"
        return f"Java 17 (spark session, PySpark): {where}"
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    match = re.search(r'version "(?:1\.)?(\d+)', out)
    if match and int(match.group(1)) < 17:
        return (f"Java 17 (spark session, PySpark): {java} is Java {match.group(1)}"
                " (install 17 and point JAVA_HOME at it)")
    return None


def _chromium_problem() -> str | None:
    """The report screenshot test runs chromium, else chromium-browser, from PATH."""
    if shutil.which("chromium") or shutil.which("chromium-browser"):
        return None
    return "Chromium (spark session, report screenshot): no chromium or chromium-browser on PATH"


#: Debian's golang-*-dev packages put their sources here; the Go interop tests build in GOPATH mode.
GOCODE = "/usr/share/gocode/src/github.com"


def _go_source_problem(package: str) -> str | None:
    """A Go library as Debian ships it (tests/interop/test_go_clients.py builds against it)."""
    if os.path.isdir(os.path.join(GOCODE, package)):
        return None
    return f"{package} (interop session, Go clients): no {GOCODE}/{package}"


# By Debian package: what the tests use, as they look for it (shutil.which, PySpark's launcher).
CHECKS = {
    "kcat": lambda: None if shutil.which("kcat") else "kcat (interop session): not on PATH",
    "golang-go": lambda: None if shutil.which("go") else "go (interop session, Go clients): not on PATH",
    # sarama's zstd binding is cgo.
    "gcc": lambda: None if shutil.which("gcc") else "gcc (interop session, cgo for sarama): not on PATH",
    "golang-github-shopify-sarama-dev": lambda: _go_source_problem("Shopify/sarama"),
    "golang-github-segmentio-kafka-go-dev": lambda: _go_source_problem("segmentio/kafka-go"),
    "chromium": _chromium_problem,
    "openjdk-17-jre-headless": _java_problem,
}
NEEDS = {"interop": ["kcat", "golang-go", "gcc", "golang-github-shopify-sarama-dev",
                     "golang-github-segmentio-kafka-go-dev"],
         "spark": ["openjdk-17-jre-headless", "chromium"]}


def _require(session: nox.Session, *names: str, abort_run: bool = False) -> None:
    """Fails the session (or with ``abort_run``, all of ``nox``) at once, with the apt command."""
    packages = [package for package in CHECKS if any(package in NEEDS[n] for n in names)]
    problems = {package: problem for package in packages if (problem := CHECKS[package]())}
    if not problems:
        return
    sudo = "" if os.geteuid() == 0 else "sudo "
    message = "\n".join([
        "missing system tools:",
        *(f"  - {problem}" for problem in problems.values()),
        f"Install them (Debian): {sudo}apt-get install {' '.join(problems)}",
        "`nox -s lint tests` needs none of them; .ci/run installs them when missing"])
    if abort_run:  # a failed session alone would not stop the sessions after it
        raise SystemExit(f"nox > Session {session.name} aborted: {message}.")
    session.error(message)


@nox.session(python=False)
def preflight(session: nox.Session) -> None:
    """Checks kcat, Go with sarama and kafka-go, Chromium, Java 17 (for interop, spark): ``nox``
    stops here if one is missing."""
    _require(session, *NEEDS, abort_run=True)
    session.log("kcat, Go (sarama, kafka-go), Chromium and Java 17 found")


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Sans-IO, network-layer, storage and coordinator tests (in-process, real sockets)."""
    session.install("-e", ".[test]")
    session.run("pytest", "-m", "not interop and not spark", *session.posargs)


@nox.session(python=PYTHON)
def interop(session: nox.Session) -> None:
    """End-to-end tests: the real broker driven by confluent-kafka, kafka-python, aiokafka, kcat,
    and Go's sarama 1.22 and kafka-go 0.2.1 (Debian's packages, built in GOPATH mode)."""
    _require(session, "interop")
    session.install("-e", ".[test]")
    session.run("pytest", "-m", "interop", *session.posargs)


@nox.session(python=PYTHON)
def spark(session: nox.Session) -> None:
    """The PySpark analytics jobs over logs of a real broker run (needs Java 17)."""
    _require(session, "spark")
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


#: mutmut's version: its mutants, names and cache change between releases.
MUTMUT = "mutmut==3.8.1"


@nox.session(python=PYTHON)
def mutation(session: nox.Session) -> None:
    """Mutation testing (mutmut) of the modules where a bug loses data or lets someone in,
    against the fast unit tests that cover them ([tool.mutmut] in pyproject.toml). Not part of
    the default ``nox``. mutmut rewrites a copy in ./mutants/, never the sources; results are
    kept there, so a run cut off by the time bound (MUTATION_TIMEOUT seconds, default 3600)
    resumes where it stopped. ``nox -s mutation -- "trio_broker.server.acl*"`` runs a subset;
    survivors are triaged in docs/development.md."""
    session.install("-e", ".[test]", MUTMUT)
    bound = os.environ.get("MUTATION_TIMEOUT", "3600")
    children = str(os.cpu_count() or 2)
    session.run("timeout", "--signal=INT", "--kill-after=60", bound,
                "mutmut", "run", "--max-children", children, *session.posargs,
                external=True, success_codes=[0, 124])
    session.run("mutmut", "results")
