"""Small requests: ApiVersions v3 per second, one in flight vs pipelined, on 1 and 50 connections.

* Kafka's rule: the broker (default ``connection.max.inflight.requests=1``) reads the next request
  of a connection only after answering the previous one, and Kafka clients keep one request in
  flight per connection;
* pipelining: the broker started with ``connection.max.inflight.requests=16`` and clients keeping
  16 requests in flight per connection (responses still in request order);
* baseline: ``bench.baseline_server framed``, a Trio server answering the same frames with the
  same canned bytes (no decoding, no handler, no log line): the transport's upper bound.

Target: pipelining at least twice the one-in-flight rate (BRIEF §7).
"""

from __future__ import annotations

from pathlib import Path

import trio

from .common import BenchResult, Figure, running_broker, running_helper
from .throughput import top_functions
from .wire import api_versions_frame, measure_rate, probe_api_versions_body

PIPELINE = 16
CONNECTION_COUNTS = (1, 50)


def _rates(port: int, window: int, warmup: float, duration: float,
           errors: list[int]) -> dict[int, float]:
    frame = api_versions_frame()
    rates: dict[int, float] = {}
    for connections in CONNECTION_COUNTS:
        rate, failed = trio.run(measure_rate, port, frame, connections, window, warmup, duration)
        rates[connections] = rate
        errors.append(failed)
    return rates


def profile(quick: bool, profile_to: Path) -> BenchResult:
    """The pipelined load (50 connections x 16 in flight) with the broker under cProfile."""
    warmup, duration = (0.3, 1.5) if quick else (0.5, 3.0)
    result = BenchResult("profile small_requests")
    overrides = {"logging.metrics.snapshot.interval.ms": "0",
                 "connection.max.inflight.requests": str(PIPELINE)}
    with running_broker(overrides, profile_to=profile_to) as broker:
        rate, errors = trio.run(measure_rate, broker.port, api_versions_frame(),
                                CONNECTION_COUNTS[-1], PIPELINE, warmup, duration)
    result.figures.append(Figure(f"broker under cProfile, {PIPELINE} in flight, "
                                 f"{CONNECTION_COUNTS[-1]} conns", rate, "req/s"))
    if errors:
        result.notes.append(f"connection errors during the load: {errors}")
    result.details = top_functions(profile_to)
    return result


def run(quick: bool) -> BenchResult:
    warmup, duration = (0.1, 0.3) if quick else (0.5, 3.0)
    result = BenchResult("small_requests")
    errors: list[int] = []
    quiet = {"logging.metrics.snapshot.interval.ms": "0"}
    with running_broker(quiet) as broker:
        body = trio.run(probe_api_versions_body, broker.port)
        one = _rates(broker.port, 1, warmup, duration, errors)
    with running_broker({**quiet, "connection.max.inflight.requests": str(PIPELINE)}) as broker:
        piped = _rates(broker.port, PIPELINE, warmup, duration, errors)
    with running_helper("framed", body.hex()) as server:
        echo_one = _rates(server.port, 1, warmup, duration, errors)
        echo_piped = _rates(server.port, PIPELINE, warmup, duration, errors)
    for conns in CONNECTION_COUNTS:
        label = f"{conns} conn{'s' if conns > 1 else ''}"
        result.figures += [
            Figure(f"broker, 1 in flight, {label}", one[conns], "req/s",
                   "trio framed server, 1 in flight", echo_one[conns]),
            Figure(f"broker, {PIPELINE} in flight, {label}", piped[conns], "req/s",
                   "broker, 1 in flight", one[conns], ">= 2x one-in-flight",
                   piped[conns] >= 2 * one[conns]),
            Figure(f"broker, {PIPELINE} in flight vs transport, {label}", piped[conns], "req/s",
                   f"trio framed server, {PIPELINE} in flight", echo_piped[conns]),
        ]
    result.notes.append(f"ApiVersions v3, {duration} s per point after {warmup} s warm-up; "
                        "client: one Trio process, frames pre-encoded, responses only framed")
    result.notes.append("reference (BRIEF §7, quoted, not measured): a Kafka client with one "
                        "request in flight on one connection does 6-8k req/s")
    if any(errors):
        result.notes.append(f"connection errors during the load: {sum(errors)}")
    return result
