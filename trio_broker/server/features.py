"""The feature table of this single-node broker (KIP-584, KIP-778) and UpdateFeatures' rules.

Sans-IO: the table, the node's feature state (a frozen value), its JSON form, and the
validation Kafka 4.0's controller applies to an UpdateFeatures request
(``FeatureControlManager.updateFeature``, ``QuorumFeatures.reasonNotSupported``). Persistence
lives in :mod:`.feature_store`; the handlers in ``handlers/update_features.py``,
``handlers/describe_quorum.py`` and ``handlers/api_versions.py``.

What is finalized, and why (docs/apis.md, "Features and quorum"):

- ``metadata.version`` 25 (``4.0-IV3``), the newest production level of Kafka 4.0, supported from
  7 (``3.3-IV3``, the lowest a 4.x node accepts) to 25. Levels above 25 name metadata records of
  Kafka 4.1+ that this broker has no notion of. A downgrade is allowed, as in Kafka, only across
  levels that did not change the metadata records (:data:`METADATA_CHANGED`): from 25 to 24 or
  23, not below ``4.0-IV1``.
- ``kraft.version`` 0: the node is the single static voter of its quorum. Level 1 (KIP-853's
  dynamic quorum) may be finalized by an upgrade; it cannot be downgraded again, as in Kafka.
- ``group.version`` 1: the consumer rebalance protocol (KIP-848) is implemented. Level 0 hides
  its APIs from ApiVersions, as Kafka does.
- ``transaction.version`` 2 (``TV_2``, what Kafka 4.0 bootstraps at ``4.0-IV2`` and later),
  supported from 0: a 4.x producer that sees level 2 uses KIP-890 part 2 (no AddPartitionsToTxn,
  an epoch bump per transaction). The broker serves those request versions at every level, as
  Kafka does: the client chooses by the finalized level. Level 1 only changes the format of
  Kafka's transaction log records. A node formatted before level 2 existed here keeps the level
  it has (0) until an UpdateFeatures raises it.

The metadata log of this node is a counter: ``end_offset`` is the number of records Kafka's
quorum would have written (the bootstrap records, a leader change per start, a feature level
record per applied update). DescribeQuorum reports it as the high watermark; ApiVersions'
``finalized_features_epoch`` is the offset of the last record, as Kafka's metadata image offset.
"""

from __future__ import annotations

import enum
import json
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

METADATA_VERSION = "metadata.version"
KRAFT_VERSION = "kraft.version"
GROUP_VERSION = "group.version"
TRANSACTION_VERSION = "transaction.version"

#: The ``metadata.version`` levels from 7 whose ``MetadataVersion`` changed the metadata records
#: (its ``didMetadataChange``): a downgrade across one of them might lose metadata.
METADATA_CHANGED = frozenset({7, 8, 11, 13, 14, 15, 17, 23})

#: KIP-848's consumer protocol needs ``group.version`` 1 (``GroupVersion.GV_1``).
CONSUMER_PROTOCOL_GROUP_VERSION = 1


@attrs.frozen
class FeatureSpec:
    """One feature this node supports: its range and the level a new node finalizes."""

    name: str
    min_version: int
    max_version: int
    bootstrap_level: int


#: The features of this node, in name order (ApiVersions lists them so).
SUPPORTED: tuple[FeatureSpec, ...] = (
    FeatureSpec(GROUP_VERSION, 0, 1, 1),
    FeatureSpec(KRAFT_VERSION, 0, 1, 0),
    FeatureSpec(METADATA_VERSION, 7, 25, 25),
    FeatureSpec(TRANSACTION_VERSION, 0, 2, 2),
)
_SPECS: dict[str, FeatureSpec] = {spec.name: spec for spec in SUPPORTED}

#: Records a freshly formatted node's metadata log holds: one feature level record per
#: feature finalized above 0 besides ``metadata.version``, plus ``metadata.version``'s own.
BOOTSTRAP_RECORDS = 1 + sum(1 for s in SUPPORTED if s.bootstrap_level and s.name != METADATA_VERSION)

#: The (single) partition of Kafka's metadata log, which DescribeQuorum describes.
METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0


class UpgradeType(enum.IntEnum):
    """``FeatureUpdate.UpgradeType`` codes (UpdateFeatures v1+); anything else is UNKNOWN."""

    UNKNOWN = 0
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3

    @classmethod
    def of(cls, code: int) -> UpgradeType:
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN


@attrs.frozen
class FeatureUpdate:
    """One entry of an UpdateFeatures request."""

    feature: str
    level: int
    upgrade_type: UpgradeType = UpgradeType.UPGRADE


@attrs.frozen(cache_hash=True)
class FeatureState:
    """The node's finalized levels and its metadata log's counters; hashable, so that
    ApiVersions caches its encoded answer per state."""

    #: ``(name, level)`` of every supported feature, in name order (0 included).
    levels: tuple[tuple[str, int], ...]
    #: Records of the metadata log (its log end offset = high watermark on one voter).
    end_offset: int
    #: Leader epoch of the quorum: one election per start of the node.
    leader_epoch: int
    #: This voter's log directory id (KIP-853), reported while ``kraft.version`` is 1+.
    directory_id: uuid.UUID

    @classmethod
    def bootstrap(cls, directory_id: uuid.UUID) -> FeatureState:
        """A new node's state, before its first election."""
        return cls(levels=tuple((s.name, s.bootstrap_level) for s in SUPPORTED),
                   end_offset=BOOTSTRAP_RECORDS, leader_epoch=0, directory_id=directory_id)

    def level(self, name: str) -> int:
        """The finalized level of ``name`` (0: not finalized, or unknown)."""
        for feature, level in self.levels:
            if feature == name:
                return level
        return 0

    def finalized(self) -> tuple[tuple[str, int], ...]:
        """What ApiVersions calls finalized: features above level 0 (Kafka removes a feature
        set to 0 from its finalized map; ``metadata.version`` is never 0)."""
        return tuple((name, level) for name, level in self.levels if level > 0)

    @property
    def epoch(self) -> int:
        """``finalized_features_epoch``: the offset of the metadata log's last record."""
        return self.end_offset - 1

    def elected(self) -> FeatureState:
        """The state after this node wins an election (at each start): a new leader epoch and
        the leader change record Kafka's quorum writes for it."""
        return attrs.evolve(self, leader_epoch=self.leader_epoch + 1,
                            end_offset=self.end_offset + 1)

    def applied(self, updates: Iterable[FeatureUpdate]) -> FeatureState:
        """The state after valid ``updates`` (one feature level record each)."""
        levels = dict(self.levels)
        count = 0
        for update in updates:
            levels[update.feature] = update.level
            count += 1
        return attrs.evolve(self, levels=tuple(sorted(levels.items())),
                            end_offset=self.end_offset + count)

    def to_json(self) -> str:
        return json.dumps({"version": 1, "features": dict(self.levels),
                           "end_offset": self.end_offset, "leader_epoch": self.leader_epoch,
                           "directory_id": str(self.directory_id)},
                          indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> FeatureState:
        """Parse a saved state; ``ValueError`` names what is wrong. Features this node no longer
        supports are refused rather than dropped: a level was finalized for them."""
        try:
            saved: Any = json.loads(text)
            levels = {str(k): int(v) for k, v in saved["features"].items()}
            end_offset, epoch = int(saved["end_offset"]), int(saved["leader_epoch"])
            directory_id = uuid.UUID(str(saved["directory_id"]))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"malformed feature state: {exc!r}") from None
        for name, level in levels.items():
            spec = _SPECS.get(name)
            if spec is None:
                raise ValueError(f"unsupported feature {name!r}")
            if not spec.min_version <= level <= spec.max_version and level != 0:
                raise ValueError(f"{name} level {level} outside {spec.min_version}-"
                                 f"{spec.max_version}")
        if end_offset < 1 or epoch < 0:
            raise ValueError("negative metadata log counters")
        merged = {s.name: levels.get(s.name, 0) for s in SUPPORTED}
        if merged[METADATA_VERSION] == 0:
            raise ValueError("metadata.version is not finalized")
        return cls(levels=tuple(sorted(merged.items())), end_offset=end_offset,
                   leader_epoch=epoch, directory_id=directory_id)


#: ``QuorumController.updateFeatures``: the first refused feature fails the whole request.
ALL_FAILED_PREFIX = "The update failed for all features since the following feature had an error: "


def _invalid(feature: str, level: int, reason: str) -> str:
    return f"Invalid update version {level} for feature {feature}. {reason}"


def update_problem(state: FeatureState, update: FeatureUpdate, node_id: int) -> str | None:
    """Why Kafka 4.0's controller refuses ``update`` (the INVALID_UPDATE_VERSION message), or
    None. The checks run in ``FeatureControlManager.updateFeature``'s order."""
    name, level, kind = update.feature, update.level, update.upgrade_type
    if kind is UpgradeType.UNKNOWN:
        return _invalid(name, level, "The controller does not support the given upgrade type.")
    current = state.level(name)
    if level < 0:
        return _invalid(name, level, "A feature version cannot be less than 0.")
    spec = _SPECS.get(name)
    if spec is None:
        if level > 0:
            return _invalid(name, level,
                            f"Local controller {node_id} does not support this feature.")
        # Level 0 is in every controller's "disabled" range; Kafka 4.0 then fails on
        # ``Feature.featureFromName``, which knows only the release's features.
        return _invalid(name, level, f"Feature {name} not found.")
    if not spec.min_version <= level <= spec.max_version:
        return _invalid(name, level, f"Local controller {node_id} only supports versions "
                                     f"{spec.min_version}-{spec.max_version}")
    if level < current and kind is UpgradeType.UPGRADE:
        return _invalid(name, level, "Can't downgrade the version of this feature without "
                                     "setting the upgrade type to either safe or unsafe downgrade.")
    if level > current and kind is not UpgradeType.UPGRADE:
        return _invalid(name, level, "Can't downgrade to a newer version.")
    if name == KRAFT_VERSION and kind is not UpgradeType.UPGRADE and level != current:
        return _invalid(name, level, "Can't downgrade the version of this feature.")
    if name == METADATA_VERSION and level < current and any(
            changed in METADATA_CHANGED for changed in range(level + 1, current + 1)):
        # MetadataVersion.checkIfMetadataChanged: a level above the target, up to the current
        # one, changed the metadata records.
        if kind is UpgradeType.UNSAFE_DOWNGRADE:
            return (f"Invalid metadata.version {level}. Unsafe metadata downgrade is not "
                    "supported in this version.")
        return (f"Invalid metadata.version {level}. Refusing to perform the requested downgrade "
                "because it might delete metadata information.")
    return None


@attrs.frozen
class UpdateOutcome:
    """An UpdateFeatures request judged: the top-level message when refused (the code is then
    INVALID_UPDATE_VERSION), and the updates to apply, one per feature."""

    error_message: str | None
    updates: tuple[FeatureUpdate, ...]


def judge_updates(state: FeatureState, updates: Iterable[FeatureUpdate], node_id: int
                  ) -> UpdateOutcome:
    """Kafka keys the request's updates by feature (the last mention wins) and applies them
    atomically: the first refused one is the request's error and nothing is applied."""
    by_feature: dict[str, FeatureUpdate] = {}
    for update in updates:
        by_feature[update.feature] = update
    for update in by_feature.values():
        problem = update_problem(state, update, node_id)
        if problem is not None:
            return UpdateOutcome(ALL_FAILED_PREFIX + problem, ())
    return UpdateOutcome(None, tuple(by_feature.values()))


def supported_ranges() -> tuple[tuple[str, int, int], ...]:
    """``(name, min, max)`` of every supported feature, for ApiVersions."""
    return tuple((s.name, s.min_version, s.max_version) for s in SUPPORTED)


def consumer_protocol_enabled(levels: Mapping[str, int] | FeatureState) -> bool:
    """Whether ``group.version`` lets the KIP-848 APIs be advertised."""
    level = levels.level(GROUP_VERSION) if isinstance(levels, FeatureState) \
        else levels.get(GROUP_VERSION, 0)
    return level >= CONSUMER_PROTOCOL_GROUP_VERSION
