"""The feature table and UpdateFeatures' validation (sans-IO: ``trio_broker.server.features``).

Messages are Kafka 4.0 controller's (``FeatureControlManager.updateFeature``,
``QuorumFeatures.reasonNotSupported``, ``QuorumController.updateFeatures``' prefix)."""

from __future__ import annotations

import json
import uuid

import pytest

from trio_broker.server.features import (
    ALL_FAILED_PREFIX,
    BOOTSTRAP_RECORDS,
    GROUP_VERSION,
    KRAFT_VERSION,
    METADATA_VERSION,
    TRANSACTION_VERSION,
    FeatureState,
    FeatureUpdate,
    UpgradeType,
    consumer_protocol_enabled,
    judge_updates,
    supported_ranges,
    update_problem,
)

NODE = 1
DIR = uuid.UUID(int=7)
UP, SAFE, UNSAFE = UpgradeType.UPGRADE, UpgradeType.SAFE_DOWNGRADE, UpgradeType.UNSAFE_DOWNGRADE


def fresh() -> FeatureState:
    return FeatureState.bootstrap(DIR).elected()


def problem(feature: str, level: int, kind: UpgradeType = UP,
            state: FeatureState | None = None) -> str | None:
    return update_problem(state or fresh(), FeatureUpdate(feature, level, kind), NODE)


def test_the_table_is_kafka_4_0s_four_features_with_what_this_node_implements() -> None:
    assert supported_ranges() == (
        (GROUP_VERSION, 0, 1), (KRAFT_VERSION, 0, 1), (METADATA_VERSION, 7, 25),
        (TRANSACTION_VERSION, 0, 2),  # KIP-890 part 2 is level 2
    )
    state = fresh()
    # kraft.version 0 (a static voter) is not "finalized"; transaction.version 2 is, as a
    # Kafka 4.0 node formatted at 4.0-IV2 or later.
    assert state.finalized() == ((GROUP_VERSION, 1), (METADATA_VERSION, 25),
                                 (TRANSACTION_VERSION, 2))
    assert consumer_protocol_enabled(state)
    assert not consumer_protocol_enabled({GROUP_VERSION: 0})


def test_counters_of_the_metadata_log() -> None:
    new = FeatureState.bootstrap(DIR)
    # metadata.version's record, group.version's and transaction.version's.
    assert (new.end_offset, new.leader_epoch) == (BOOTSTRAP_RECORDS, 0) == (3, 0)
    started = new.elected()
    assert (started.end_offset, started.leader_epoch, started.epoch) == (4, 1, 3)
    changed = started.applied([FeatureUpdate(GROUP_VERSION, 0, SAFE)])
    assert (changed.end_offset, changed.epoch, changed.level(GROUP_VERSION)) == (5, 4, 0)
    assert changed.finalized() == ((METADATA_VERSION, 25), (TRANSACTION_VERSION, 2))
    assert changed.leader_epoch == 1


@pytest.mark.parametrize(("feature", "level", "kind", "reason"), [
    ("metadata.version", 26, UP, "Local controller 1 only supports versions 7-25"),
    ("metadata.version", 1, UP, "Local controller 1 only supports versions 7-25"),
    ("metadata.version", 0, SAFE, "Local controller 1 only supports versions 7-25"),
    ("transaction.version", 3, UP, "Local controller 1 only supports versions 0-2"),
    ("group.version", 2, UP, "Local controller 1 only supports versions 0-1"),
    ("group.version", -1, SAFE, "A feature version cannot be less than 0."),
    ("nonsense", 1, UP, "Local controller 1 does not support this feature."),
    ("nonsense", 0, SAFE, "Feature nonsense not found."),
    ("group.version", 0, UP, "Can't downgrade the version of this feature without setting the "
                             "upgrade type to either safe or unsafe downgrade."),
    ("kraft.version", 1, SAFE, "Can't downgrade to a newer version."),
    ("group.version", 1, UpgradeType.UNKNOWN,
     "The controller does not support the given upgrade type."),
])
def test_refusals_name_the_feature_and_level(feature: str, level: int, kind: UpgradeType,
                                             reason: str) -> None:
    assert problem(feature, level, kind) == \
        f"Invalid update version {level} for feature {feature}. {reason}"


def test_metadata_version_downgrades_only_across_unchanged_metadata() -> None:
    # 24 and 25 changed no metadata records; 23 (4.0-IV1) did: down to 23 is safe, below not.
    assert problem(METADATA_VERSION, 24, SAFE) is None
    assert problem(METADATA_VERSION, 23, SAFE) is None
    assert problem(METADATA_VERSION, 23, UNSAFE) is None
    assert problem(METADATA_VERSION, 22, SAFE) == (
        "Invalid metadata.version 22. Refusing to perform the requested downgrade because it "
        "might delete metadata information.")
    assert problem(METADATA_VERSION, 7, UNSAFE) == (
        "Invalid metadata.version 7. Unsafe metadata downgrade is not supported in this version.")
    assert problem(METADATA_VERSION, 25, UP) is None  # the same level: accepted
    # From 16 (3.7-IV1): 16 itself changed nothing, 15 did; 17 did, so up then down is refused.
    at_16 = fresh().applied([FeatureUpdate(METADATA_VERSION, 16, SAFE)])
    assert problem(METADATA_VERSION, 15, SAFE, at_16) is None
    assert problem(METADATA_VERSION, 14, SAFE, at_16) is not None
    at_18 = fresh().applied([FeatureUpdate(METADATA_VERSION, 18, SAFE)])
    assert problem(METADATA_VERSION, 16, SAFE, at_18) is not None


def test_kraft_version_goes_up_but_never_down() -> None:
    assert problem(KRAFT_VERSION, 1, UP) is None
    dynamic = fresh().applied([FeatureUpdate(KRAFT_VERSION, 1)])
    assert problem(KRAFT_VERSION, 0, SAFE, dynamic) == (
        "Invalid update version 0 for feature kraft.version. Can't downgrade the version of "
        "this feature.")


def test_allowed_changes() -> None:
    assert problem(GROUP_VERSION, 0, SAFE) is None
    assert problem(GROUP_VERSION, 0, UNSAFE) is None
    assert problem(TRANSACTION_VERSION, 1, SAFE) is None
    assert problem(TRANSACTION_VERSION, 0, UNSAFE) is None
    assert problem(TRANSACTION_VERSION, 2, UP) is None  # unchanged
    assert problem(TRANSACTION_VERSION, 1, UP) == (
        "Invalid update version 1 for feature transaction.version. Can't downgrade the version "
        "of this feature without setting the upgrade type to either safe or unsafe downgrade.")


def test_one_refused_update_fails_the_whole_request() -> None:
    outcome = judge_updates(fresh(), [FeatureUpdate(TRANSACTION_VERSION, 1, SAFE),
                                      FeatureUpdate(GROUP_VERSION, 5)], NODE)
    assert outcome.updates == ()
    assert outcome.error_message == ALL_FAILED_PREFIX + (
        "Invalid update version 5 for feature group.version. Local controller 1 only supports "
        "versions 0-1")


def test_the_last_mention_of_a_feature_wins() -> None:
    outcome = judge_updates(fresh(), [FeatureUpdate(GROUP_VERSION, 7),
                                      FeatureUpdate(TRANSACTION_VERSION, 1, SAFE),
                                      FeatureUpdate(GROUP_VERSION, 0, SAFE)], NODE)
    assert outcome.error_message is None
    assert outcome.updates == (FeatureUpdate(GROUP_VERSION, 0, SAFE),
                               FeatureUpdate(TRANSACTION_VERSION, 1, SAFE))
    assert judge_updates(fresh(), [], NODE).updates == ()


def test_json_round_trip_and_refusals() -> None:
    state = fresh().applied([FeatureUpdate(TRANSACTION_VERSION, 1, SAFE)])
    assert FeatureState.from_json(state.to_json()) == state
    saved = json.loads(state.to_json())
    for broken in ({**saved, "features": {**saved["features"], "share.version": 1}},
                   {**saved, "features": {**saved["features"], "group.version": 9}},
                   {**saved, "features": {**saved["features"], "metadata.version": 0}},
                   {k: v for k, v in saved.items() if k != "end_offset"},
                   {**saved, "end_offset": 0}):
        with pytest.raises(ValueError):
            FeatureState.from_json(json.dumps(broken))
    with pytest.raises(ValueError):
        FeatureState.from_json("[]")
