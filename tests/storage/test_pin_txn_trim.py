"""What a read_committed Fetch may return (``txn_index.trim_to``): the leading whole batches
below the LSO, never a byte of a batch at or past it. Each test kills mutants that survived
``nox -s mutation`` (docs/development.md)."""

from __future__ import annotations

from trio_broker.protocol import records as rb
from trio_broker.storage.cleaner import empty_batch
from trio_broker.storage.txn_index import last_offset_of, trim_to


def batch(base_offset: int, count: int = 2) -> bytes:
    return rb.build_batch([(None, b"v%d" % i, (), 1_000 + i) for i in range(count)],
                          base_offset=base_offset)


def test_nothing_is_returned_when_the_first_batch_reaches_the_lso() -> None:
    """An open transaction's first batch at the fetch position: the consumer gets nothing
    (not the whole buffer, not a stray byte of the undecided batch)."""
    records = batch(5) + batch(7)
    assert trim_to(records, 5) == b""
    assert trim_to(records, 6) == b""  # the batch 5-6 is not wholly below the LSO
    assert last_offset_of(trim_to(records, 6)) == -1


def test_whole_batches_below_the_lso_are_kept_and_the_rest_cut() -> None:
    first, second, third = batch(0), batch(2), batch(4)
    records = first + second + third
    assert trim_to(records, 4) == first + second
    assert trim_to(records, 6) == records
    assert trim_to(records, 3) == first


def test_an_empty_batch_left_by_compaction_is_a_batch_like_any_other() -> None:
    """The cleaner keeps a header-only batch (no records) for a producer's last sequence; a
    read_committed fetch passes over it instead of stopping there."""
    kept = batch(0)
    emptied = empty_batch(rb.decode_header(batch(2)))
    assert len(emptied) == rb.HEADER_SIZE
    after = batch(4)
    records = kept + emptied + after
    assert trim_to(records, 10) == records
    assert trim_to(records, 4) == kept + emptied
    assert trim_to(emptied + after, 10) == emptied + after


def test_a_torn_tail_is_left_out() -> None:
    """A fetch read cut inside a batch: the whole batches before it are returned."""
    whole = batch(0)
    records = whole + batch(2)[:30]
    assert trim_to(records, 10) == whole
