"""Loading: Java ``.properties`` parsing, ``key=value`` overrides, and :func:`load_config`, which
merges the sources (later wins), converts each value by its declaration, sorts
``listener.name.<listener>.<key>`` keys into per-listener settings, and validates the result.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .fields import ConfigError, _convert
from .listeners import _JAAS_KEY_RE, LISTENER_PREFIXABLE_KEYS, LISTENER_SECURITY_KEYS
from .settings import _FIELDS, BrokerConfig
from .validation import validate

#: Keys of real Kafka ``server.properties`` files that are accepted (and reported as ignored)
#: because they have no meaning for a single-node broker without ZooKeeper or a Raft quorum.
KAFKA_KEYS_WITHOUT_EFFECT = frozenset(
    {
        "broker.id.generation.enable",
        "controller.listener.names",
        "controller.quorum.voters",
        "controller.quorum.bootstrap.servers",
        "inter.broker.listener.name",
        "inter.broker.protocol.version",
        "log.message.format.version",
        "num.recovery.threads.per.data.dir",
        "num.replica.fetchers",
        "offsets.topic.replication.factor",
        "process.roles",
        "transaction.state.log.min.isr",
        "transaction.state.log.replication.factor",
        "zookeeper.connect",
        "zookeeper.connection.timeout.ms",
        "min.insync.replicas",
        "unclean.leader.election.enable",
    }
)

#: Kafka keys that switch on a feature this broker does not implement: accepting them as
#: ignored keys would leave the user believing the feature is on, so they fail at start-up.
UNSUPPORTED_FEATURE_KEYS = {
    "delegation.token.secret.key": "delegation tokens are not implemented (the token APIs "
                                   "answer DELEGATION_TOKEN_AUTH_DISABLED, as Kafka without "
                                   "this key); remove it",
    "delegation.token.master.key": "delegation tokens are not implemented (the token APIs "
                                   "answer DELEGATION_TOKEN_AUTH_DISABLED, as Kafka without "
                                   "this key); remove it",
}

#: Old spellings Kafka still accepts, mapped to the key we store them under.
KEY_ALIASES = {"broker.id": "node.id"}


_LISTENER_PREFIX_RE = re.compile(r"^listener\.name\.(?P<listener>[^.]+)\.(?P<key>.+)$")


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text: ``key=value`` or ``key: value``, ``#``/``!`` comments,
    backslash line continuations."""
    props: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        match = re.match(r"^((?:\\.|[^=:\s])+)\s*[=:\s]\s*(.*)$", logical)
        if match:
            props[_unescape(match.group(1))] = _unescape(match.group(2))
        elif logical:
            props[logical] = ""
        logical = ""
    return props


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    """Java properties escapes: ``\\t``, ``\\n``, ``\\uXXXX``, and ``\\x`` -> ``x``."""
    if "\\" not in text:
        return text
    out = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            nxt = text[index + 1]
            if nxt == "u" and index + 6 <= len(text):
                try:
                    out.append(chr(int(text[index + 2:index + 6], 16)))
                    index += 6
                    continue
                except ValueError:
                    pass
            out.append(_ESCAPES.get(nxt, nxt))
            index += 2
            continue
        out.append(char)
        index += 1
    return "".join(out)


def load_properties_file(path: str | Path) -> dict[str, str]:
    try:
        return parse_properties(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError("--config", str(path), f"the file cannot be read ({exc.strerror})") from exc


def parse_override(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError("--override", text, "overrides must look like key=value")
    return key.strip(), value


def load_config(*sources: Mapping[str, str] | Iterable[tuple[str, str]]) -> BrokerConfig:
    """Build a validated :class:`BrokerConfig` from string sources; later sources win.

    Raises :class:`ConfigError` naming the key and what is allowed on the first bad value.
    """
    merged: dict[str, str] = {}
    for source in sources:
        items = source.items() if isinstance(source, Mapping) else source
        for key, value in items:
            merged[KEY_ALIASES.get(key.strip(), key.strip())] = value

    values: dict[str, Any] = {}
    overrides: dict[str, dict[str, int]] = {}
    security: dict[str, dict[str, str]] = {}
    ignored: list[str] = []
    for key, text in merged.items():
        field = _FIELDS.get(key)
        if field is None:
            prefixed = _LISTENER_PREFIX_RE.match(key)
            if prefixed and prefixed["key"] in LISTENER_PREFIXABLE_KEYS:
                base = _FIELDS[prefixed["key"]]
                value = _convert(key, base, text)
                overrides.setdefault(prefixed["listener"].lower(), {})[prefixed["key"]] = value
            elif prefixed and (prefixed["key"] in LISTENER_SECURITY_KEYS
                               or _JAAS_KEY_RE.match(prefixed["key"])):
                if prefixed["key"] in _FIELDS:
                    _convert(key, _FIELDS[prefixed["key"]], text)  # fails here when malformed
                security.setdefault(prefixed["listener"].lower(), {})[prefixed["key"]] = text
            elif key in UNSUPPORTED_FEATURE_KEYS:
                raise ConfigError(key, "<hidden>", UNSUPPORTED_FEATURE_KEYS[key])
            else:
                ignored.append(key)
            continue
        values[field.name] = _convert(key, field, text)

    config = BrokerConfig(
        **values, listener_overrides=overrides, listener_security=security,
        ignored_keys=tuple(sorted(ignored))
    )
    validate(config)
    return config
