"""Operator tools that talk to a running broker over the Kafka protocol, as Kafka's scripts do.

They are clients: they import the sans-IO protocol layer, never the server.
"""
