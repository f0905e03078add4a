"""The node's feature state, kept in a small durable file in the data directory.

The state itself and every rule about it are sans-IO (:mod:`.features`); this holds the current
value, loads it at start-up (in a worker thread, where a new election is written) and saves each
change off the event loop, as the dynamic broker configs and the quota files are.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from ..storage.durable import DurableFile, write_durably
from .features import FeatureState, FeatureUpdate

#: The file in the data directory (``log.dirs``' first directory).
FEATURES_FILE = "features.json"


class FeatureStore:
    """The current :class:`FeatureState`; replaced whole on each change."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / FEATURES_FILE
        self._file = DurableFile(self.path)
        #: The state handlers read. Until :meth:`load` runs (a broker built without the app,
        #: as unit tests do) it is a new node's state, not saved.
        self.state = FeatureState.bootstrap(uuid.uuid4()).elected()

    def load(self) -> None:
        """Read the saved state (or bootstrap a new one) and record this start's election,
        durably. Blocking: called in a worker thread before the broker serves. A file that
        cannot be read stops the start naming it."""
        if self.path.exists():
            try:
                saved = FeatureState.from_json(self.path.read_text(encoding="utf-8"))
            except ValueError as exc:
                raise RuntimeError(f"cannot read the feature state in {self.path}: {exc}"
                                   ) from None
        else:
            saved = FeatureState.bootstrap(uuid.uuid4())
        self.state = saved.elected()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_durably(self.path, self.state.to_json())

    async def apply(self, updates: tuple[FeatureUpdate, ...]) -> FeatureState:
        """Apply validated updates and save the new state before answering (Kafka answers once
        the records are committed)."""
        self.state = self.state.applied(updates)
        await self._file.save(lambda: self.state.to_json())
        return self.state
