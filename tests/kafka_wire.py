"""The raw Kafka-protocol client of the network-layer tests: now
:mod:`trio_broker.testing.client` (the pytest plugin's Trio client builds on it).

Real clients (confluent-kafka, kafka-python, aiokafka, kcat) drive the end-to-end tests; this one
exists to send what real clients never send: pipelined bursts, bad frames, exact byte sequences.
"""

from __future__ import annotations

import os
import socket

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest

from trio_broker.testing.client import MAX_RESPONSE_BYTES, ResponseFrames, WireClient

__all__ = ["API_VERSIONS_V3", "MAX_RESPONSE_BYTES", "METADATA_ALL_V12", "ResponseFrames",
           "WireClient"]

API_VERSIONS_V3 = ApiVersionsRequest(client_software_name="wire-test", client_software_version="1.0")
METADATA_ALL_V12 = MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                   include_topic_authorized_operations=False)


def readable(client: WireClient) -> bool:
    """Whether the broker has sent anything (or closed) on this connection, without waiting."""
    with socket.socket(fileno=os.dup(client.stream.socket.fileno())) as sock:
        try:
            sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
    return True
