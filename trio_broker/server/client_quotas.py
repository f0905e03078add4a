"""Client quotas: what AlterClientQuotas sets and DescribeClientQuotas reads (KIP-546).

Entities are Kafka's: ``user``, ``client-id`` and their combination, each name specific or the
default (``None``, ``<default>`` in Kafka's tools), and ``ip`` on its own. Kafka keeps them in its
metadata log; here they live in ``client-quotas.json`` in the data directory (so they survive a
restart). ``ip`` quotas (``connection_creation_rate``, KIP-612) are applied to the socket
server's :class:`~trio_broker.network.quotas.ConnectionQuotas`; user and client-id quotas are
read by the :class:`~trio_broker.server.quota_manager.QuotaManagers` on every request, so a
change applies to the very next request.

Validation follows Kafka's ``ClientQuotaControlManager`` (alter) and ``ClientQuotasImage``
(describe), messages included.
"""

from __future__ import annotations

import ipaddress
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from ..config import BrokerConfig
from ..network.quotas import ConnectionQuotas
from ..storage.durable import DurableFile
from .quota_manager import QuotaManagers

QUOTAS_FILE = "client-quotas.json"
USER = "user"
CLIENT_ID = "client-id"
IP_ENTITY = "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

_INT_MAX = float(2**31 - 1)
_LONG_MAX = float(2**63 - 1)
#: ``QuotaConfig.userAndClientQuotaConfigs()``: the keys of user / client-id entities and the
#: ConfigDef type that decides how a value is checked.
USER_CLIENT_KEYS: Mapping[str, str] = {
    PRODUCER_BYTE_RATE: "LONG", CONSUMER_BYTE_RATE: "LONG", REQUEST_PERCENTAGE: "DOUBLE",
    CONTROLLER_MUTATION_RATE: "DOUBLE"}
#: ``QuotaConfig.ipConfigs()``.
IP_KEYS: Mapping[str, str] = {CONNECTION_CREATION_RATE: "INT"}

#: An entity: ``(entity type, name or None for the default)`` pairs, sorted by type.
Entity = tuple[tuple[str, str | None], ...]

#: ``ComponentData.match_type`` codes of DescribeClientQuotas.
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def entity_of(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    return tuple(sorted(pairs, key=lambda pair: pair[0]))


def entity_text(entity: Entity) -> str:
    """As Kafka's ``ClientQuotaEntity.toString`` names an entity in messages."""
    return "ClientQuotaEntity(entries={" + ", ".join(
        f"{kind}={name if name is not None else 'null'}" for kind, name in entity) + "})"


@attrs.frozen
class QuotaProblem(Exception):
    """A request Kafka refuses: the error name (``invalid_request``, ...) and its message."""

    error: str
    message: str


@attrs.frozen
class Alteration:
    """One AlterClientQuotas entry: the entity and ``{key: value, or None to remove}``."""

    entity: tuple[tuple[str, str | None], ...]
    ops: tuple[tuple[str, float | None], ...]


class ClientQuotas:
    """The broker's client quotas: stored, persisted, applied."""

    def __init__(self, data_dir: Path, connection_quotas: ConnectionQuotas,
                 config: BrokerConfig) -> None:
        self._path = data_dir / QUOTAS_FILE
        self._file = DurableFile(self._path)
        self._connections = connection_quotas
        self._entities: dict[Entity, dict[str, float]] = {}
        #: Each entity's line of the file (in the order entities were first set).
        self._lines: dict[Entity, str] = {}
        self.managers = QuotaManagers(config)

    # ---------------------------------------------------------------- persistence
    def load(self) -> None:
        """Apply the quotas saved by an earlier run (either file format)."""
        if not self._path.exists():
            return
        entities: dict[Entity, dict[str, float]] = {}
        try:
            for entry in json.loads(self._path.read_text(encoding="utf-8")):
                if "entity" in entry:
                    entity = entity_of(entry["entity"].items())
                    values = {k: float(v) for k, v in entry["quotas"].items()}
                else:  # the first format: ip entities only
                    entity = ((IP_ENTITY, entry["ip"]),)
                    values = {CONNECTION_CREATION_RATE: float(entry[CONNECTION_CREATION_RATE])}
                entities[entity] = values
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            # As the ACLs: starting without the saved quotas would silently lift them.
            raise RuntimeError(f"cannot read the client quotas in {self._path}: {exc!r}"
                               ) from None
        self._entities.update(entities)
        for entity in entities:
            self._encode(entity)
        self._applied()

    def _snapshot(self) -> str:
        # One line per entity, encoded when the entity changes: re-encoding every entity (with
        # json's pure-Python indent= encoder) on each AlterClientQuotas held the event loop,
        # every connection of the broker, for 1.5 s at 50,000 entities.
        lines = self._lines
        return "[\n" + ",\n".join(lines.values()) + "\n]\n" if lines else "[]\n"

    def _encode(self, entity: Entity) -> None:
        values = self._entities.get(entity)
        if values is None:
            self._lines.pop(entity, None)
        else:
            self._lines[entity] = json.dumps({"entity": dict(entity),
                                              "quotas": dict(sorted(values.items()))})

    def _applied(self) -> None:
        """Push the stored quotas to where they are enforced."""
        ip_rates: dict[str | None, float] = {}
        for entity, values in self._entities.items():
            if entity[0][0] == IP_ENTITY and CONNECTION_CREATION_RATE in values:
                ip_rates[entity[0][1]] = values[CONNECTION_CREATION_RATE]
        for ip in set(self._connections.ip_connection_rates()) - set(ip_rates):
            self._connections.set_ip_connection_rate(ip, None)
        for ip, rate in ip_rates.items():
            self._connections.set_ip_connection_rate(ip, rate)
        self.managers.update(self._entities)

    # ---------------------------------------------------------------- reading
    def entities(self) -> dict[Entity, dict[str, float]]:
        return {entity: dict(values) for entity, values in self._entities.items()}

    def ip_connection_rates(self) -> dict[str | None, float]:
        """``{ip or None (the default): connections per second}``."""
        return self._connections.ip_connection_rates()

    def describe(self, components: Iterable[tuple[str, int, str | None]], strict: bool
                 ) -> list[tuple[Entity, dict[str, float]]]:
        """Entities matching a DescribeClientQuotas filter (Kafka's ``ClientQuotasImage``);
        raises :class:`QuotaProblem` for a filter Kafka refuses."""
        exact: dict[str, str | None] = {}
        specified: set[str] = set()
        for kind, match_type, match in components:
            if not kind:
                raise QuotaProblem("invalid_request", "Invalid empty entity type.")
            if kind in exact or kind in specified:
                raise QuotaProblem("invalid_request",
                                   f"Entity type {kind} cannot appear more than once in the "
                                   "filter.")
            if kind not in (IP_ENTITY, USER, CLIENT_ID):
                raise QuotaProblem("unsupported_version", f"Unsupported entity type {kind}")
            if match_type == MATCH_EXACT:
                if match is None:
                    raise QuotaProblem("invalid_request", "Request specified MATCH_TYPE_EXACT, "
                                       "but set match string to null.")
                exact[kind] = match
            elif match_type == MATCH_DEFAULT:
                if match is not None:
                    raise QuotaProblem("invalid_request", "Request specified "
                                       "MATCH_TYPE_DEFAULT, but also specified a match string.")
                exact[kind] = None
            elif match_type == MATCH_SPECIFIED:
                if match is not None:
                    raise QuotaProblem("invalid_request", "Request specified "
                                       "MATCH_TYPE_SPECIFIED, but also specified a match "
                                       "string.")
                specified.add(kind)
            else:
                raise QuotaProblem("invalid_request", f"Unknown match type {match_type}")
        kinds = set(exact) | specified
        if IP_ENTITY in kinds and kinds & {USER, CLIENT_ID}:
            raise QuotaProblem("invalid_request", "Invalid entity filter component "
                               "combination. IP filter component should not be used with user "
                               "or clientId filter component.")
        found = []
        for entity, values in sorted(self._entities.items(), key=_sort_key):
            names = dict(entity)
            if strict and len(names) != len(kinds):
                continue
            if all(kind in names and names[kind] == match for kind, match in exact.items()) \
                    and all(kind in names for kind in specified):
                found.append((entity, dict(values)))
        return found

    # ---------------------------------------------------------------- changing
    async def alter(self, alterations: Iterable[Alteration], validate_only: bool = False
                    ) -> list[tuple[Entity, QuotaProblem | None]]:
        """Kafka's ``alterClientQuotas``: one result per entity (in first-seen order); entities
        that pass are applied (unless ``validate_only``) and enforced at once, and persisted
        (off the event loop) before the results are returned."""
        results: dict[Entity, QuotaProblem | None] = {}
        changes: dict[Entity, dict[str, float | None]] = {}
        for alteration in alterations:
            entity = entity_of(alteration.entity)
            ops: dict[str, float | None] = {}
            problem: QuotaProblem | None = None
            for key, value in alteration.ops:
                if key in ops:
                    problem = QuotaProblem("invalid_request", f"Duplicate quota key {key} not "
                                           f"updating quota for this entity "
                                           f"{entity_text(entity)}")
                ops[key] = value
            if entity in results or problem is not None:
                # Kafka overwrites any earlier result of the entity with this one.
                results[entity] = QuotaProblem("invalid_request",
                                               f"Ignoring duplicate entity {entity_text(entity)}")
                changes.pop(entity, None)
                continue
            try:
                results[entity] = None
                changes[entity] = _checked(alteration.entity, ops)
            except QuotaProblem as refused:
                results[entity] = refused
        if not validate_only and changes:
            for entity, ops in changes.items():
                values = self._entities.setdefault(entity, {})
                for key, value in ops.items():
                    if value is None:
                        values.pop(key, None)
                    else:
                        values[key] = value
                if not values:
                    del self._entities[entity]
                self._encode(entity)
            self._applied()
            await self._file.save(self._snapshot)
        return list(results.items())


def _sort_key(item: tuple[Entity, Any]) -> tuple[tuple[str, str, str], ...]:
    return tuple((kind, "" if name is None else "\x01" + name, "") for kind, name in item[0])


def _checked(pairs: tuple[tuple[str, str | None], ...], ops: dict[str, float | None]
             ) -> dict[str, float | None]:
    """Kafka's ``validateEntity``, ``configKeysForEntityType`` and ``validateQuotaKeyValue``."""
    if not pairs:
        raise QuotaProblem("invalid_request", "Invalid empty client quota entity")
    names: dict[str, str | None] = {}
    for kind, name in pairs:
        if kind in names:
            raise QuotaProblem("invalid_request",
                               f"Invalid client quota entity, duplicate entity entry {kind}")
        if kind not in (USER, CLIENT_ID, IP_ENTITY):
            raise QuotaProblem("invalid_request", f"Unhandled client quota entity type: {kind}")
        if name is not None and name == "":
            raise QuotaProblem("invalid_request", f"Empty {kind} not supported")
        names[kind] = name
    if IP_ENTITY in names:
        if len(names) > 1:
            # Kafka's message, missing space included.
            raise QuotaProblem("invalid_request", "Invalid quota entity combination, IP entity "
                               "shouldnot be combined with User or ClientId")
        problem = ip_entity_problem(names[IP_ENTITY])
        if problem is not None:
            raise QuotaProblem("invalid_request", problem)
        keys = IP_KEYS
    else:
        keys = USER_CLIENT_KEYS
    for key, value in ops.items():
        if value is None:
            continue  # removing a key that is not set is no change, whatever the key
        key_type = keys.get(key)
        if key_type is None:
            raise QuotaProblem("invalid_request", f"Invalid configuration key {key}")
        if not value > 0.0:
            raise QuotaProblem("invalid_request", f"Quota {key} must be greater than 0")
        if key_type == "INT" and value > _INT_MAX:
            raise QuotaProblem("invalid_request",
                               f"Proposed value for {key} is too large for an INT.")
        if key_type == "LONG" and value > _LONG_MAX:
            raise QuotaProblem("invalid_request",
                               f"Proposed value for {key} is too large for a LONG.")
        if key_type in ("INT", "LONG") and (math.isinf(value) or abs(value % 1.0) > 1e-6):
            raise QuotaProblem("invalid_request", f"{key} cannot be a fractional value.")
    return ops


def ip_entity_problem(name: str | None) -> str | None:
    """Why an ``ip`` entity name is refused, in Kafka's words, or None.

    Kafka also accepts a resolvable host name; this broker takes IP addresses only, so that a
    request never waits for DNS.
    """
    if name is None:
        return None
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return f"{name} is not a valid IP or resolvable host."
    return None
