"""Go clients of the old protocol against the real broker: sarama 1.22 and kafka-go 0.2.1 as
Debian packages them (golang-github-shopify-sarama-dev, golang-github-segmentio-kafka-go-dev),
built in GOPATH mode from ``tests/interop/go/``.

Each program produces, consumes in a consumer group with commits, is restarted and must resume
at the commit, and looks offsets up by timestamp; it prints a JSON summary and exits 1 on any
failure. Uncompressed, one record per produce request; with each codec the client offers for
these message formats, ten records per request, so that the broker takes compressed wrapper
messages apart (inner offsets, timestamps) and builds them again for the old fetch versions.
The versions each client sends are read back from the broker's request log, so a client that
silently moved to newer versions (or a broker that refused the old ones) shows here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BrokerProcess

pytestmark = pytest.mark.interop

GO_SOURCES = Path(__file__).parent / "go"
#: Where Debian's golang-*-dev packages put their sources (a GOPATH tree).
DEBIAN_GOPATH = Path("/usr/share/gocode")
PROGRAMS = {
    "sarama": ("sarama_client", "github.com/Shopify/sarama", "golang-github-shopify-sarama-dev"),
    "kafka-go": ("kafkago_client", "github.com/segmentio/kafka-go",
                 "golang-github-segmentio-kafka-go-dev"),
}
RECORDS = 40
#: Under pytest's 120 s; the programs give up sooner themselves (80 s, 60 s) with a summary.
RUN_TIMEOUT = 100.0
#: Records per produce request with a codec.
CHUNK = 10


def _go_env(cache: Path) -> dict[str, str]:
    """GOPATH mode over Debian's tree: no modules, no network."""
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": str(DEBIAN_GOPATH), "GOFLAGS": "",
           "GOPROXY": "off"}
    # Go's own build cache (~/.cache/go-build) keeps later sessions' builds at about a second;
    # without a home for it, one under the session's temporary directory.
    if not any(env.get(name) for name in ("GOCACHE", "XDG_CACHE_HOME", "HOME")):
        env["GOCACHE"] = str(cache)
    return env


@pytest.fixture(scope="session")
def go_program(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``go_program("sarama")``: that client's program, built once per session."""
    out = tmp_path_factory.mktemp("go-bin")
    built: dict[str, Path] = {}

    def build(client: str) -> Path:
        if client in built:
            return built[client]
        directory, package, debian = PROGRAMS[client]
        go = shutil.which("go")
        missing = [name for name, ok in (
            ("golang-go", go is not None),
            (debian, (DEBIAN_GOPATH / "src" / package).is_dir())) if not ok]
        if missing:  # a failure, not a skip: the interop session needs them (.ci/run installs them)
            pytest.fail(f"missing for the Go interop tests: apt-get install {' '.join(missing)}")
        assert go is not None
        binary = out / directory
        done = subprocess.run([go, "build", "-o", str(binary), "."], cwd=GO_SOURCES / directory,
                              env=_go_env(out / "cache"), capture_output=True, text=True,
                              timeout=600, check=False)
        assert done.returncode == 0, f"go build {directory}:\n{done.stderr}"
        built[client] = binary
        return binary

    return build


def run(binary: Path, *args: str) -> dict[str, Any]:
    """Runs a client program; its last stdout line is the JSON summary."""
    done = subprocess.run([str(binary), *args], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT, check=False)
    lines = done.stdout.strip().splitlines()
    assert lines, f"{binary.name} printed nothing (exit {done.returncode}):\n{done.stderr[-4000:]}"
    summary: dict[str, Any] = json.loads(lines[-1])
    assert done.returncode == 0 and summary["ok"], (
        f"{binary.name}: {summary.get('error')}\n{summary}\n{done.stderr[-4000:]}")
    return summary


def versions_by_client(broker: BrokerProcess) -> dict[str, set[tuple[str, int]]]:
    """Every (API, version) the broker served, by client id, from its request log lines."""
    seen: dict[str, set[tuple[str, int]]] = {}
    for event in broker.events("request"):
        seen.setdefault(event.get("client_id") or "", set()).add(
            (event["api"], event["api_version"]))
    return seen


def assert_versions(seen: set[tuple[str, int]], always: set[tuple[str, int]],
                    sometimes: frozenset[tuple[str, int]] = frozenset()) -> None:
    """The client sent every (API, version) of ``always`` and nothing outside ``always`` and
    ``sometimes`` (requests that depend on timing, like a heartbeat in a short session)."""
    assert always <= seen, f"never sent: {sorted(always - seen)}; sent {sorted(seen)}"
    assert seen <= always | sometimes, f"unexpected: {sorted(seen - always - sometimes)}"


def assert_clean(broker: BrokerProcess) -> None:
    """No request refused as malformed or unsupported, none failed in its handler."""
    for name in ("invalid_request", "unsupported_api", "request_failed"):
        assert broker.events(name) == [], (name, broker.events(name))


def codec_args(codec: str) -> list[str]:
    return ["-codec", codec, "-chunk", "1" if codec == "none" else str(CHUNK)]


#: What sarama's legacy phase sends besides FindCoordinator v0 and OffsetFetch/OffsetCommit v1,
#: by its ``Version``: the default (0.8.2.0) and the two others that still list offsets with v0.
LEGACY_VERSIONS = {
    "default": {("Metadata", 0), ("Produce", 0), ("Fetch", 0), ("ListOffsets", 0)},
    "0.9.0.0": {("Metadata", 0), ("Produce", 0), ("Fetch", 1), ("ListOffsets", 0)},
    "0.10.0.0": {("Metadata", 1), ("Produce", 2), ("Fetch", 2), ("ListOffsets", 0)},
}


# lz4 needs sarama's V0_10_0_0, above the legacy phase's default version.
@pytest.mark.parametrize(("codec", "legacy_version"), [
    ("none", "default"), ("gzip", "default"), ("snappy", "default"), ("none", "0.9.0.0"),
    ("gzip", "0.10.0.0")])
def test_sarama_1_22(broker_process: Callable[..., BrokerProcess],
                     go_program: Callable[[str], Path], codec: str, legacy_version: str) -> None:
    binary = go_program("sarama")
    broker = broker_process()
    summary = run(binary, "-broker", broker.bootstrap, "-prefix", "sarama", "-n", str(RECORDS),
                  "-legacy-version", legacy_version, *codec_args(codec))
    assert summary["codec"] == codec
    half, quarter = RECORDS // 2, RECORDS // 4

    legacy = summary["legacy"]
    assert legacy["version"] == ("0.8.2.0" if legacy_version == "default" else legacy_version)
    assert legacy["produced"] == RECORDS
    assert (legacy["first_run"], legacy["committed"]) == (half, half)
    assert (legacy["resumed_at"], legacy["second_run"]) == (half, RECORDS - half)
    assert (legacy["oldest"], legacy["newest"]) == (0, RECORDS)
    # ListOffsets v0 by time answers by segment: the log end (stamped now) for an hour ahead,
    # nothing for an hour back (the only segment was written since).
    assert (legacy["hour_ahead"], legacy["hour_back_none"]) == (RECORDS, True)

    group = summary["group"]
    assert group["produced"] == RECORDS
    assert group["first_run"] == 2 * quarter
    assert group["committed"] == {"0": quarter, "1": quarter}
    assert group["resumed_at"] == {"0": quarter, "1": quarter}
    assert group["second_run"] == RECORDS - 2 * quarter
    assert group["timestamp_hits"] == 2 * RECORDS
    assert group["past_end"] == {"0": -1, "1": -1}  # no record at or after the time asked for

    versions = versions_by_client(broker)
    # Offsets kept through OffsetCommit v1 (an OffsetManager, no group membership).
    assert_versions(versions["sarama-legacy"], LEGACY_VERSIONS[legacy_version] | {
        ("FindCoordinator", 0), ("OffsetFetch", 1), ("OffsetCommit", 1)})
    # V0_10_2_0, the lowest its ConsumerGroup takes: message format v1 with timestamps.
    assert_versions(versions["sarama-group"], {
        ("Metadata", 1), ("CreateTopics", 0), ("Produce", 2), ("Fetch", 3), ("ListOffsets", 1),
        ("FindCoordinator", 0), ("JoinGroup", 1), ("SyncGroup", 0), ("LeaveGroup", 0),
        ("OffsetFetch", 1), ("OffsetCommit", 1)}, frozenset({("Heartbeat", 0)}))
    assert_clean(broker)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_kafka_go_0_2_1(broker_process: Callable[..., BrokerProcess],
                        go_program: Callable[[str], Path], codec: str) -> None:
    binary = go_program("kafka-go")
    broker = broker_process()
    summary = run(binary, "-broker", broker.bootstrap, "-topic", "kafka-go", "-group", "kafka-go",
                  "-n", str(RECORDS), *codec_args(codec))
    assert summary["codec"] == codec
    quarter = RECORDS // 4

    assert summary["produced"] == RECORDS
    assert summary["first_run"] == 2 * quarter
    assert summary["second_run"] == RECORDS - 2 * quarter
    assert summary["resumed_at"] == {"0": quarter, "1": quarter}
    assert summary["committed"] == {"0": RECORDS // 2, "1": RECORDS // 2}  # after the restart
    assert summary["per_partition"] == {"0": RECORDS // 2, "1": RECORDS // 2}  # round robin
    assert summary["timestamp_hits"] == 2 * RECORDS
    assert summary["past_end"] == {"0": -1, "1": -1}

    # kafka-go 0.2.1 hard-codes its versions and never sends ApiVersions; its Reader.Close does
    # not leave the group (LeaveGroup only after an error).
    assert_versions(versions_by_client(broker)["kafka-go-interop"], {
        ("CreateTopics", 0), ("Metadata", 1), ("Produce", 2), ("Fetch", 2), ("ListOffsets", 1),
        ("FindCoordinator", 0), ("JoinGroup", 1), ("SyncGroup", 0), ("OffsetFetch", 1),
        ("OffsetCommit", 2)}, frozenset({("Heartbeat", 0), ("LeaveGroup", 0)}))
    assert_clean(broker)
