"""The transaction coordinator (KIP-98, KIP-447): transactional ids, their producer ids and
epochs, and the two-phase commit of a transaction's partitions and offsets.

``state`` is the sans-IO state machine (Kafka's ``TransactionMetadata`` transitions),
``records`` the ``__transaction_state`` record format, ``coordinator`` the Trio side (the log
writes, the markers, the timeout task) and ``offsets`` the transactional offset commits
(TxnOffsetCommit) held until the transaction ends.
"""

from .coordinator import TransactionCoordinator
from .state import TxnMetadata, TxnState

__all__ = ["TransactionCoordinator", "TxnMetadata", "TxnState"]
