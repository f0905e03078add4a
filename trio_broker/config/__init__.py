"""The broker's one configuration class.

Every setting is an attribute of :class:`BrokerConfig`, declared with the Kafka key it is read from,
its default, its validator and its documentation. Loading (:func:`load_config`), validation and the
reference documentation (:func:`config_reference_markdown`) all walk the same declarations, so they
cannot drift apart.

Sources, later wins: the defaults, a Kafka-style ``server.properties`` file, then ``key=value``
overrides (as ``kafka-server-start.sh --override`` accepts them).

The package, by idea: :mod:`.fields` (how a setting is declared, parsed and checked),
:mod:`.listeners` (listener, protocol-map and per-IP parsing), :mod:`.settings` (the settings
table, :class:`BrokerConfig`), :mod:`.loading` (properties files, overrides, :func:`load_config`),
:mod:`.validation` (cross-key rules) and :mod:`.reference` (the markdown reference). Import from
``trio_broker.config``: every public name is here.
"""

from .fields import (
    INT_MAX,
    LONG_MAX,
    ConfigError,
    Parser,
    Validator,
    at_least,
    between,
    one_of,
    setting,
)
from .listeners import (
    IMPLEMENTED_SECURITY_PROTOCOLS,
    LISTENER_PREFIXABLE_KEYS,
    LISTENER_SECURITY_KEYS,
    SECURITY_PROTOCOLS,
    Endpoint,
    parse_endpoints,
    parse_ip_overrides,
    parse_protocol_map,
)
from .loading import (
    KAFKA_KEYS_WITHOUT_EFFECT,
    KEY_ALIASES,
    load_config,
    load_properties_file,
    parse_override,
    parse_properties,
)
from .reference import config_reference_markdown
from .settings import BrokerConfig, known_keys
from .validation import validate

__all__ = [
    "IMPLEMENTED_SECURITY_PROTOCOLS",
    "INT_MAX",
    "KAFKA_KEYS_WITHOUT_EFFECT",
    "KEY_ALIASES",
    "LISTENER_PREFIXABLE_KEYS",
    "LISTENER_SECURITY_KEYS",
    "LONG_MAX",
    "SECURITY_PROTOCOLS",
    "BrokerConfig",
    "ConfigError",
    "Endpoint",
    "Parser",
    "Validator",
    "at_least",
    "between",
    "config_reference_markdown",
    "known_keys",
    "load_config",
    "load_properties_file",
    "one_of",
    "parse_endpoints",
    "parse_ip_overrides",
    "parse_override",
    "parse_properties",
    "parse_protocol_map",
    "setting",
    "validate",
]
