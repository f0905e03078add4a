"""On-disk partitioned log storage in Kafka's layout (see docs/storage.md)."""

from .errors import StorageError
from .log import AppendResult, PartitionLog, ReadResult
from .manager import LogManager, TopicInfo
from .topic_config import ConfigEntry

__all__ = ["AppendResult", "ConfigEntry", "LogManager", "PartitionLog", "ReadResult",
           "StorageError", "TopicInfo"]
