"""Dynamic broker configuration (Kafka's KIP-226 ``DynamicBrokerConfig``): the keys declared
``dynamic=True`` in :mod:`.settings` may be changed while the broker runs, for this broker (the
BROKER resource named by its node id) or as the cluster-wide default (the BROKER resource named
``""``). Precedence, as Kafka's: DYNAMIC_BROKER_CONFIG, then DYNAMIC_DEFAULT_BROKER_CONFIG,
then STATIC_BROKER_CONFIG (the properties file, overrides), then DEFAULT_CONFIG.

The changes are kept in ``dynamic-broker-configs.json`` in the data directory (Kafka keeps them
in its metadata log), written durably on each change and applied again at start-up.

Kafka's rules (``ConfigAdminManager``, ``DynamicBrokerConfig.validateConfigs``): a key that
cannot be changed at run time is refused with INVALID_REQUEST "Cannot update these configs
dynamically: Set(...)"; a value of the wrong type or out of range with INVALID_REQUEST too
(KAFKA-13609: Kafka turns the ConfigException into an InvalidRequestException). Kafka accepts
keys it does not know as custom configs; trio_broker refuses them with INVALID_CONFIG, as the
BRIEF wants unknown keys reported rather than silently kept.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from ..storage.durable import DurableFile
from .fields import ConfigError, _convert
from .loading import KAFKA_KEYS_WITHOUT_EFFECT
from .settings import _FIELDS, BrokerConfig
from .validation import validate

DYNAMIC_CONFIGS_FILE = "dynamic-broker-configs.json"

#: The keys trio_broker applies while running (each also dynamic in Kafka 3.9).
DYNAMIC_KEYS: frozenset[str] = frozenset(
    key for key, field in _FIELDS.items() if field.metadata.get("dynamic"))

#: ``DynamicBrokerConfig.brokerConfigSynonyms``: keys that name the same setting, finest first.
_SYNONYM_GROUPS = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
)


def broker_synonyms(key: str) -> tuple[str, ...]:
    """The keys Kafka lists as synonyms of broker key ``key`` (``key`` itself first where it
    is the finest; ``log.flush.interval.ms`` falls back to ``log.flush.scheduler.interval.ms``
    but not the other way round)."""
    for group in _SYNONYM_GROUPS:
        if key == group[0] or (key in group and group[0] != "log.flush.interval.ms"):
            return group
    return (key,)


def scala_set(names: Iterable[str]) -> str:
    """A set of names as Kafka's messages print a Scala ``Set``."""
    return "Set(" + ", ".join(sorted(names)) + ")"


class DynamicConfigError(Exception):
    """A change Kafka refuses: the error (``invalid_request`` / ``invalid_config``) and message."""

    def __init__(self, error: str, message: str) -> None:
        self.error = error
        self.message = message
        super().__init__(message)


def check_props(props: Mapping[str, str]) -> dict[str, Any]:
    """Kafka's ``DynamicBrokerConfig.validateConfigs`` for one resource's new dynamic configs:
    return them parsed, by attribute name, or raise :class:`DynamicConfigError`."""
    unknown = [k for k in props if k not in _FIELDS and k not in KAFKA_KEYS_WITHOUT_EFFECT]
    if unknown:
        raise DynamicConfigError("invalid_config",
                                 f"Unknown broker configs: {scala_set(unknown)}")
    fixed = [k for k in props if k not in DYNAMIC_KEYS]
    if fixed:
        raise DynamicConfigError("invalid_request",
                                 f"Cannot update these configs dynamically: {scala_set(fixed)}")
    values: dict[str, Any] = {}
    for key, text in props.items():
        field = _FIELDS[key]
        try:
            values[field.name] = _convert(key, field, text)
        except ConfigError as exc:
            raise DynamicConfigError("invalid_request", str(exc)) from None
    return values


class DynamicBrokerConfigs:
    """This broker's dynamic configs: kept, persisted, and merged over the static config."""

    def __init__(self, static: BrokerConfig, *, path: Path | None = None) -> None:
        #: The config the broker started with (file, overrides, defaults).
        self.static = static
        self.path = path if path is not None else static.data_dir / DYNAMIC_CONFIGS_FILE
        #: ``{key: text}`` of the BROKER resource named by this node's id.
        self.per_broker: dict[str, str] = {}
        #: ``{key: text}`` of the cluster-wide default (the BROKER resource named "").
        self.defaults: dict[str, str] = {}
        self._file = DurableFile(self.path)
        #: The effective config: static, then defaults, then per-broker values.
        self.current = static

    # ---------------------------------------------------------------- persistence
    def load(self) -> None:
        """Read the saved dynamic configs (at start-up, in a worker thread). A file that cannot
        be read, or a saved value that is no longer valid, stops the start naming it."""
        if not self.path.exists():
            return
        try:
            saved = json.loads(self.path.read_text(encoding="utf-8"))
            per_broker = {str(k): str(v) for k, v in saved.get("broker", {}).items()}
            defaults = {str(k): str(v) for k, v in saved.get("default", {}).items()}
        except (ValueError, AttributeError, TypeError) as exc:
            raise RuntimeError(f"cannot read the dynamic broker configs in {self.path}: "
                               f"{exc!r}") from None
        try:
            self.current = self._merge(defaults, per_broker)
        except DynamicConfigError as exc:
            raise RuntimeError(f"dynamic broker configs in {self.path}: {exc.message}"
                               ) from None
        self.per_broker, self.defaults = per_broker, defaults

    def _snapshot(self) -> str:
        return json.dumps({"version": 1, "broker": self.per_broker, "default": self.defaults},
                          indent=2, sort_keys=True) + "\n"

    async def save(self) -> None:
        """Write the dynamic configs durably, off the event loop."""
        await self._file.save(self._snapshot)

    # ---------------------------------------------------------------- changes
    def configs_of(self, resource_name: str) -> dict[str, str]:
        """A copy of the dynamic configs of the resource ("" is the cluster default)."""
        return dict(self.per_broker if resource_name else self.defaults)

    def _merge(self, defaults: Mapping[str, str], per_broker: Mapping[str, str]
               ) -> BrokerConfig:
        values = check_props(defaults)
        values.update(check_props(per_broker))
        config = attrs.evolve(self.static, **values)
        try:
            validate(config)
        except ConfigError as exc:
            raise DynamicConfigError("invalid_request", str(exc)) from None
        return config

    def prepare(self, resource_name: str, props: Mapping[str, str]) -> BrokerConfig:
        """The effective config if the resource's dynamic configs became ``props`` (nothing
        changes); raises :class:`DynamicConfigError`."""
        if resource_name:
            return self._merge(self.defaults, props)
        return self._merge(props, self.per_broker)

    def commit(self, resource_name: str, props: Mapping[str, str],
               config: BrokerConfig) -> None:
        """Make ``props`` the resource's dynamic configs and ``config`` (from :meth:`prepare`)
        the current one. The caller applies it and :meth:`save`\\ s."""
        if resource_name:
            self.per_broker = dict(props)
        else:
            self.defaults = dict(props)
        self.current = config
