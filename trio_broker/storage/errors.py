"""Storage errors, each carrying the Kafka error code a handler answers with."""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class StorageError(Exception):
    """A storage operation failed in a way the client is told about with ``error_code``."""

    error_code: ErrorCode = ErrorCode.unknown_server_error

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


class UnknownTopicOrPartition(StorageError):
    error_code = ErrorCode.unknown_topic_or_partition


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


class OutOfOrderSequence(StorageError):
    error_code = ErrorCode.out_of_order_sequence_number


class InvalidProducerEpoch(StorageError):
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
