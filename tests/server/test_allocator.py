"""The broker process keeps large buffers in the heap: a megabyte frame read, taken and freed
per request is not page-faulted in again each time (counted in minor page faults, not timed)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")

_CHURN = textwrap.dedent("""
    import resource, sys
    from trio_broker.protocol.framing import FrameDecoder, frame
    from trio_broker.server.allocator import keep_large_buffers_in_heap
    if sys.argv[1] == "tuned":
        assert keep_large_buffers_in_heap()
    decoder = FrameDecoder(64 * 1024 * 1024)
    request = frame(bytes(1024 * 1024))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(200):  # what the reader does with a 1 MiB Produce request
        decoder.feed(request)
        decoder.take(decoder.pending_size())
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")

def _faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", _CHURN, mode], capture_output=True, text=True,
                         check=True, timeout=60)
    return int(out.stdout)


def test_megabyte_frames_do_not_page_fault_per_request() -> None:
    untuned, tuned = _faults("default"), _faults("tuned")
    # 200 MiB churned: 51,200 pages when each buffer is mapped anew, a handful when reused.
    assert tuned < 2_000, tuned
    assert untuned > 10 * tuned, (untuned, tuned)
