"""trio_broker: a Kafka-compatible broker on Trio's structured concurrency."""

__version__ = "0.1.0"
