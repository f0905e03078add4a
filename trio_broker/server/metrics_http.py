"""Prometheus text-format metrics over HTTP (``metrics.prometheus.listener``), served by Trio."""

from __future__ import annotations

import trio
from prometheus_client import CONTENT_TYPE_LATEST

from ..observability.log import emit
from ..observability.metrics import BrokerMetrics

_MAX_REQUEST_HEAD = 8192


async def serve_metrics(address: str, metrics: BrokerMetrics, *,
                        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Answer ``GET /metrics`` (any path, in fact) with the broker's registry; reports the port."""
    host, _, port_text = address.rpartition(":")
    listeners = await trio.open_tcp_listeners(int(port_text), host=host or None)
    port = int(listeners[0].socket.getsockname()[1])
    emit("metrics_server_started", host=host, port=port)

    async def answer(stream: trio.SocketStream) -> None:
        # A scraper that misbehaves costs its own connection, never the broker.
        try:
            await _answer(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(stream)

    async def _answer(stream: trio.SocketStream) -> None:
        with trio.move_on_after(10):
            head = b""
            while b"\r\n\r\n" not in head and len(head) < _MAX_REQUEST_HEAD:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    return
                head += chunk
            if head.startswith(b"GET "):
                body = metrics.exposition()
                status = b"200 OK"
                content_type = CONTENT_TYPE_LATEST.encode()
            else:
                body, status, content_type = b"only GET\n", b"405 Method Not Allowed", b"text/plain"
            await stream.send_all(
                b"HTTP/1.1 " + status + b"\r\nContent-Type: " + content_type
                + b"\r\nContent-Length: " + str(len(body)).encode()
                + b"\r\nConnection: close\r\n\r\n" + body)

    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, answer, listeners)
        task_status.started(port)
