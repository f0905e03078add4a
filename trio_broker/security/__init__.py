"""Kafka's security on the front end: TLS contexts and certificate principals (:mod:`.tls`),
the SASL server side (:mod:`.sasl`, sans-IO; the bare tokens after SaslHandshake v0:
:mod:`.raw_sasl`) and the SCRAM credential store (:mod:`.scram`).

:func:`trio_broker.security.listeners.listener_security` builds what each listener needs once, at
start-up, so a bad keystore or JAAS entry stops the broker with an error naming the key."""
