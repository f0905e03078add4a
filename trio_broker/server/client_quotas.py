"""Client quotas: today the connection creation rate of ``ip`` entities (KIP-612).

Kafka keeps these quotas in its metadata log and applies them to ``ConnectionQuotas``; here they
live in ``client-quotas.json`` in the data directory (so they survive a restart) and in the
socket server's :class:`~trio_broker.network.quotas.ConnectionQuotas`.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

from ..network.quotas import ConnectionQuotas

QUOTAS_FILE = "client-quotas.json"
IP_ENTITY = "ip"
CONNECTION_CREATION_RATE = "connection_creation_rate"


class ClientQuotas:
    """The broker's client quotas, applied to its connection quotas and persisted."""

    def __init__(self, data_dir: Path, connection_quotas: ConnectionQuotas) -> None:
        self._path = data_dir / QUOTAS_FILE
        self._connections = connection_quotas

    def load(self) -> None:
        """Apply the quotas saved by an earlier run."""
        if not self._path.exists():
            return
        for entry in json.loads(self._path.read_text(encoding="utf-8")):
            self._connections.set_ip_connection_rate(entry["ip"],
                                                     float(entry[CONNECTION_CREATION_RATE]))

    def ip_connection_rates(self) -> dict[str | None, float]:
        """``{ip or None (the default): connections per second}``."""
        return self._connections.ip_connection_rates()

    def set_ip_connection_rates(self, changes: dict[str | None, float | None]) -> None:
        """Apply and persist changes (a None rate removes that entity's quota)."""
        for ip, rate in changes.items():
            self._connections.set_ip_connection_rate(ip, rate)
        entries = [{"ip": ip, CONNECTION_CREATION_RATE: rate}
                   for ip, rate in sorted(self.ip_connection_rates().items(),
                                          key=lambda item: item[0] or "")]
        tmp = self._path.with_suffix(".tmp")
        tmp.write_text(json.dumps(entries, indent=1) + "\n", encoding="utf-8")
        tmp.replace(self._path)


def ip_entity_problem(name: str | None) -> str | None:
    """Why an ``ip`` entity name is refused (Kafka requires an IP address), or None."""
    if name is None:
        return None
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return f"{name!r} is not a valid IP address"
    return None
