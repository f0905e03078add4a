"""The configuration reference (docs/configuration.md), rendered from the declarations."""

from __future__ import annotations

from typing import Any

import attrs

from .fields import _any
from .listeners import LISTENER_PREFIXABLE_KEYS
from .settings import _FIELDS


def config_reference_markdown() -> str:
    """The configuration reference (docs/configuration.md) rendered from the declarations."""
    lines = [
        "# Configuration reference",
        "",
        "Generated from `trio_broker/config/settings.py` (`python -m trio_broker.config`). Keys are Kafka's;",
        "a Kafka `server.properties` works as the config file. Listener-scoped keys may be given as",
        "`listener.name.<listener>.<key>` for: " + ", ".join(sorted(LISTENER_PREFIXABLE_KEYS)) + ",",
        "and every key of the Security group, plus `listener.name.<listener>.<mechanism>.sasl.jaas.config`",
        "(docs/security.md). Keys marked **dynamic** can also be changed while the broker runs, per",
        "broker or as the cluster-wide default (IncrementalAlterConfigs, `trio_broker configs",
        "--entity-type brokers --alter`; docs/dynamic-configs.md).",
        "",
    ]
    groups: dict[str, list[attrs.Attribute[Any]]] = {}
    for field in _FIELDS.values():
        groups.setdefault(field.metadata["group"], []).append(field)
    for group, fields in groups.items():
        lines += [f"## {group}", "", "| key | type | default | description |", "|---|---|---|---|"]
        for field in fields:
            meta = field.metadata
            default = ("unset" if field.default is None
                       else "empty" if field.default == "" else f"`{field.default}`")
            doc = meta["doc"]
            allowed = meta["validator"].__doc__
            if allowed and meta["validator"] is not _any:
                doc += f" {allowed}."
            if meta.get("dynamic"):
                doc += " **dynamic**"
            lines.append(f"| `{meta['key']}` | {meta['type_name']} | {default} | {doc} |")
        lines.append("")
    return "\n".join(lines)
