"""A producer and consumer over SASL_SSL with SCRAM-SHA-512 (or over mTLS), with confluent-kafka.

Start a broker with a SASL_SSL listener and a SCRAM user (docs/security.md has the whole walk
through, including making the PEM keystore)::

    trio_broker scram --data-dir /tmp/secure --alter --entity-type users --entity-name alice \\
        --add-config 'SCRAM-SHA-512=[iterations=8192,password=alice-secret]'
    trio_broker run -o listeners=SASL_SSL://localhost:9093 -o log.dirs=/tmp/secure \\
        -o ssl.keystore.location=broker.pem -o sasl.enabled.mechanisms=SCRAM-SHA-512

then::

    python examples/secure_client.py --bootstrap localhost:9093 --ca ca.pem \\
        --user alice --password alice-secret
    python examples/secure_client.py --bootstrap localhost:9094 --ca ca.pem \\
        --cert client-cert.pem --key client-key.pem          # an SSL listener with mTLS
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer


def client_config(args: argparse.Namespace) -> dict[str, Any]:
    """librdkafka's keys: security.protocol, sasl.mechanisms, ssl.ca.location, ..."""
    config: dict[str, Any] = {"bootstrap.servers": args.bootstrap,
                              "ssl.ca.location": args.ca}
    if args.cert:
        config.update({"security.protocol": "SSL", "ssl.certificate.location": args.cert,
                       "ssl.key.location": args.key})
    else:
        config.update({"security.protocol": "SASL_SSL", "sasl.mechanisms": args.mechanism,
                       "sasl.username": args.user, "sasl.password": args.password})
    return config


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="localhost:9093")
    parser.add_argument("--ca", required=True, help="PEM file of the CA that signed the broker")
    parser.add_argument("--user", default="alice")
    parser.add_argument("--password", default="alice-secret")
    parser.add_argument("--mechanism", default="SCRAM-SHA-512",
                        choices=["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
    parser.add_argument("--cert", help="client certificate (PEM): mTLS instead of SASL")
    parser.add_argument("--key", help="the client certificate's private key (PEM)")
    parser.add_argument("--topic", default="secure-example")
    args = parser.parse_args()
    config = client_config(args)
    errors: list[str] = []
    config["error_cb"] = lambda error: errors.append(str(error))

    producer = Producer(config)
    for index in range(5):
        producer.produce(args.topic, f"secret message {index}".encode())
    if producer.flush(15):
        print("could not deliver; broker said:", *errors[-3:], sep="\n  ", file=sys.stderr)
        return 1
    print(f"produced 5 messages to {args.topic} as", args.user if not args.cert else args.cert)

    consumer = Consumer({**config, "group.id": "secure-example", "auto.offset.reset": "earliest"})
    consumer.subscribe([args.topic])
    received = 0
    deadline = time.monotonic() + 30
    try:
        while received < 5 and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error():
                raise KafkaException(message.error())
            received += 1
            value = (message.value() or b"").decode()
            print(f"  {message.partition()}:{message.offset()} {value}")
    finally:
        consumer.close()
    return 0 if received == 5 else 1


if __name__ == "__main__":
    sys.exit(main())
