"""Storage errors, each carrying the Kafka error code a handler answers with."""

from __future__ import annotations

import attrs
from kio.schema.errors import ErrorCode

from ..protocol.records import RecordBatchError


class StorageError(Exception):
    """A storage operation failed in a way the client is told about with ``error_code``."""

    error_code: ErrorCode = ErrorCode.unknown_server_error

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


class UnknownTopicOrPartition(StorageError):
    error_code = ErrorCode.unknown_topic_or_partition

    @classmethod
    def not_hosted(cls, topic: str, partition: int) -> UnknownTopicOrPartition:
        """Kafka's text for a partition this node does not (or no longer) host."""
        return cls(f"This server does not host this topic-partition: {topic}-{partition}")


class TopicAlreadyExists(StorageError):
    error_code = ErrorCode.topic_already_exists


class InvalidPartitions(StorageError):
    error_code = ErrorCode.invalid_partitions


class InvalidTopic(StorageError):
    error_code = ErrorCode.invalid_topic_exception


class InvalidConfig(StorageError):
    error_code = ErrorCode.invalid_config


class CorruptMessage(StorageError):
    error_code = ErrorCode.corrupt_message


class InvalidRecord(StorageError):
    error_code = ErrorCode.invalid_record


class MessageTooLarge(StorageError):
    error_code = ErrorCode.message_too_large


class RecordListTooLarge(StorageError):
    """Kafka's RecordBatchTooLargeException: the records of one append exceed segment.bytes."""

    error_code = ErrorCode.record_list_too_large


class OffsetOutOfRange(StorageError):
    error_code = ErrorCode.offset_out_of_range


@attrs.frozen
class ProducerRefusal:
    """Why a partition's producer state refused a batch, in numbers: what Kafka's broker logs
    with such a refusal (``ProducerAppendInfo``), for the Produce's ``request`` log line.

    ``expected_seq`` is -1 when no sequence was checked (a stale epoch: the epoch decides);
    ``current_epoch`` is the partition's epoch of the producer (-1: it knows none)."""

    error: str
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    current_epoch: int
    expected_seq: int
    received_seq: int

    def describe(self) -> str:
        """``orders-3 OUT_OF_ORDER_SEQUENCE_NUMBER pid=4000 epoch=2 expected_seq=15
        got_seq=17``; ``current_epoch=`` follows ``epoch=`` when the two differ (a stale or a
        new epoch), ``expected_seq=`` is left out when no sequence was checked."""
        text = (f"{self.topic}-{self.partition} {self.error} pid={self.producer_id} "
                f"epoch={self.producer_epoch}")
        if self.current_epoch != self.producer_epoch:
            text += f" current_epoch={self.current_epoch}"
        if self.expected_seq >= 0:
            text += f" expected_seq={self.expected_seq}"
        return text + f" got_seq={self.received_seq}"


class ProducerStateError(StorageError):
    """A batch refused by the partition's producer state (idempotence and epoch checks)."""

    def __init__(self, message: str, refusal: ProducerRefusal | None = None) -> None:
        super().__init__(message)
        #: The refusal's numbers (None when raised without them).
        self.refusal = refusal


class OutOfOrderSequence(ProducerStateError):
    error_code = ErrorCode.out_of_order_sequence_number


class InvalidProducerEpoch(ProducerStateError):
    error_code = ErrorCode.invalid_producer_epoch


class InvalidTimestamp(StorageError):
    error_code = ErrorCode.invalid_timestamp


class KafkaStorageError(StorageError):
    """The disk failed under us (an OSError while writing or reading)."""

    error_code = ErrorCode.kafka_storage_error


class PolicyViolation(StorageError):
    error_code = ErrorCode.policy_violation


#: RecordBatchError.kind -> the StorageError class to raise.
BATCH_ERRORS: dict[str, type[StorageError]] = {
    "corrupt_message": CorruptMessage,
    "invalid_record": InvalidRecord,
    "message_too_large": MessageTooLarge,
}


def batch_error(exc: RecordBatchError) -> StorageError:
    """The storage error (and so the Produce error code) of a batch the parser refused; a kind
    without a Kafka error of its own is CORRUPT_MESSAGE, as Kafka answers undecodable records."""
    return BATCH_ERRORS.get(exc.kind, CorruptMessage)(exc.message)
