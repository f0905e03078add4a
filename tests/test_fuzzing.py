"""The fuzzer itself (bench/fuzzing.py): deterministic, every mutation used, frames split right."""

from __future__ import annotations

import struct
from collections import Counter

from bench.fuzzing import (
    MUTATIONS,
    Mutator,
    api_of,
    load_seed_frames,
    split_frames,
    validate_only,
)

SEEDS = [p for frames in load_seed_frames().values() for p in frames]


def test_same_seed_same_mutants_other_seed_others() -> None:
    first = [m.wire for m, _ in zip(Mutator(SEEDS, 1), range(500), strict=False)]
    again = [m.wire for m, _ in zip(Mutator(SEEDS, 1), range(500), strict=False)]
    other = [m.wire for m, _ in zip(Mutator(SEEDS, 2), range(500), strict=False)]
    assert first == again
    assert first != other


def test_every_mutation_and_api_is_used_and_prefixes_mostly_match() -> None:
    mutator = Mutator(SEEDS, 3)
    mutants = [mutator.next() for _ in range(5000)]
    assert set(mutator.op_counts) == {*MUTATIONS, "prefix_ok", "prefix_broken"}
    assert set(mutator.api_counts) == {api_of(p) for p in SEEDS}
    broken = [m for m in mutants if not m.prefix_ok]
    assert 0.01 < len(broken) / len(mutants) < 0.06
    for mutant in mutants:
        if mutant.prefix_ok:
            assert struct.unpack_from(">i", mutant.wire, 0)[0] == len(mutant.wire) - 4
    unchanged = {validate_only(p) for p in SEEDS}
    assert sum(m.wire[4:] in unchanged for m in mutants) < len(mutants) // 100
    # The killer shape: a compact length varint of 2^32 - 2 appears in mutants.
    assert sum(b"\xff\xff\xff\xff\x0f" in m.wire for m in mutants) > 100


def test_split_frames_keeps_the_incomplete_rest() -> None:
    data = struct.pack(">i", 3) + b"abc" + struct.pack(">i", 0) + struct.pack(">i", 5) + b"xy"
    frames, rest = split_frames(data)
    assert frames == [b"abc", b""]
    assert rest == struct.pack(">i", 5) + b"xy"
    assert split_frames(b"\x00\x00")[1] == b"\x00\x00"
    assert split_frames(struct.pack(">i", -1) + b"zz") == ([], struct.pack(">i", -1) + b"zz")


def test_validate_only_touches_only_create_requests() -> None:
    changed = Counter(api_of(p)[0] for p in SEEDS if validate_only(p) != p)
    assert set(changed) == {19, 37}
    for payload in SEEDS:
        patched = validate_only(payload)
        assert len(patched) == len(payload)
        assert sum(a != b for a, b in zip(payload, patched, strict=True)) <= 1
