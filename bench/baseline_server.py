"""Minimal Trio servers used as baselines: ``python -m bench.baseline_server MODE PORT [BODY_HEX]``.

* ``framed``: reads size-prefixed Kafka request frames and answers each with a canned response
  (the given body after the request's correlation id), gathering the replies of one read into
  one ``send_all``. It is the upper bound of the transport for small requests, and the "minimal
  trio server" holding idle connections in the memory benchmark.
* ``sink``: reads into a reused buffer and throws the bytes away; at end of stream it answers
  with the byte count (8 bytes), so the sender knows everything arrived.

It prints ``listening`` once its socket is bound and exits on SIGTERM.
"""

from __future__ import annotations

import signal
import struct
import sys
from collections.abc import Awaitable, Callable
from functools import partial

import trio

_SIZE = struct.Struct(">i")


async def serve_framed(body: bytes, stream: trio.SocketStream) -> None:
    """Answer every complete frame with ``size + correlation id + body``."""
    buffer = bytearray()
    reply_size = _SIZE.pack(4 + len(body))
    while True:
        try:
            data = await stream.receive_some(65536)
        except trio.BrokenResourceError:
            return
        if not data:
            return
        buffer += data
        out = bytearray()
        pos = 0
        end = len(buffer)
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(buffer, pos)
            if end - pos - 4 < size:
                break
            # Request header v1/v2: api_key (2), api_version (2), correlation_id (4).
            out += reply_size
            out += buffer[pos + 8:pos + 12]
            out += body
            pos += 4 + size
        del buffer[:pos]
        if out:
            try:
                await stream.send_all(out)
            except trio.BrokenResourceError:
                return


async def serve_sink(stream: trio.SocketStream) -> None:
    """Discard everything; report the byte count at end of stream."""
    buffer = bytearray(1 << 20)
    view = memoryview(buffer)
    total = 0
    sock = stream.socket
    while True:
        received = await sock.recv_into(view)
        if not received:
            break
        total += received
    await stream.send_all(struct.pack(">q", total))
    await stream.aclose()


async def main(mode: str, port: int, body_hex: str) -> None:
    handler: Callable[[trio.SocketStream], Awaitable[None]]
    if mode == "framed":
        handler = partial(serve_framed, bytes.fromhex(body_hex))
    elif mode == "sink":
        handler = serve_sink
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(trio.serve_tcp, handler, port, host="127.0.0.1",
                                    backlog=4096))
        print("listening", flush=True)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break


if __name__ == "__main__":
    trio.run(main, sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "")
