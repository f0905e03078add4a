"""A child process that runs ``decode_request`` on frames the test sends it.

A decoder bug that aborts the process (kio's native reader allocating an untrusted count) would
kill pytest itself if the frame were decoded in-process. Here it kills only the child: the test
that sent the frame fails, names the frame, and shows the child's stderr; the next test starts a
fresh child.

Protocol on the child's stdin/stdout: the parent writes ``<u32 count>`` then ``<u32 len><frame>``
per frame; the child answers one line per frame: ``ok``, ``invalid <reason>\t<detail>`` or
``error <repr>`` (any other exception, which is a bug too).
"""

from __future__ import annotations

import contextlib
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_CHILD = r"""
import struct, sys
from trio_broker.protocol.codec import InvalidRequest, decode_request
from trio_broker.server.registry import supported_versions
supported = supported_versions()
stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
while True:
    head = stdin.read(4)
    if len(head) < 4:
        break
    (count,) = struct.unpack(">I", head)
    for _ in range(count):
        (size,) = struct.unpack(">I", stdin.read(4))
        frame = stdin.read(size)
        try:
            decode_request(frame, supported)
            out = "ok"
        except InvalidRequest as exc:
            out = "invalid " + exc.reason + "\t" + exc.detail.replace("\n", " ")
        except BaseException as exc:  # reported to the parent as a bug
            out = "error " + repr(exc).replace("\n", " ")
        # One flushed line per frame: if a frame kills the process, the parent knows which.
        stdout.write(out.encode() + b"\n")
        stdout.flush()
"""


class WorkerDied(AssertionError):
    """The child process died while decoding one of the frames."""


class DecodeWorker:
    """One child process; :meth:`decode` raises :class:`WorkerDied` if a frame killed it."""

    def __init__(self) -> None:
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the child
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD], cwd=ROOT, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._stderr)

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None

    def decode(self, frames: list[bytes]) -> list[str]:
        """The outcome of each frame, in order."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        message = [struct.pack(">I", len(frames))]
        for frame in frames:
            message += [struct.pack(">I", len(frame)), frame]
        try:
            self._proc.stdin.write(b"".join(message))
            self._proc.stdin.flush()
            lines = []
            for _ in frames:
                lines.append(self._proc.stdout.readline())
                if not lines[-1]:
                    break
        except BrokenPipeError:
            lines = [b""]
        if not lines or not lines[-1]:
            self._proc.wait(timeout=30)
            self._stderr.seek(0)
            stderr = self._stderr.read().decode(errors="replace")[-2000:]
            answered = next(index for index, line in enumerate(lines) if not line)
            culprit = frames[answered].hex() if answered < len(frames) else "?"
            raise WorkerDied(f"the decoder process died (exit {self._proc.returncode}) on frame "
                             f"{answered} of {len(frames)}: {culprit}\nstderr:\n{stderr}")
        return [line.decode().rstrip("\n") for line in lines]

    def close(self) -> None:
        if self._proc.stdin is not None:
            with contextlib.suppress(OSError):  # the child may be dead already
                self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        finally:
            if self._proc.stdout is not None:
                self._proc.stdout.close()
            self._stderr.close()


def outcome(worker: DecodeWorker, frame: bytes) -> tuple[str, str | None, str | None]:
    """``("ok", None, None)``, ``("invalid", reason, detail)`` or ``("error", repr, None)``."""
    (line,) = worker.decode([frame])
    kind, _, rest = line.partition(" ")
    if kind == "invalid":
        reason, _, detail = rest.partition("\t")
        return kind, reason, detail
    return kind, rest or None, None


def live(holder: list[DecodeWorker]) -> DecodeWorker:
    """The holder's worker, restarted if an earlier frame killed it (that test failed)."""
    if not holder[0].alive:
        holder[0] = DecodeWorker()
    return holder[0]
