"""How a setting is declared, parsed and checked: :func:`setting` (an attrs field carrying the
Kafka key, default, parser, validator and documentation), the value parsers, the single-value
validators, and :class:`ConfigError`.

Loading, the settings' derived views and the reference documentation all use these declarations,
so they cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


class ConfigError(ValueError):
    """A configuration key has a value that is not allowed; the message names both."""

    def __init__(self, key: str, value: object, allowed: str) -> None:
        self.key = key
        self.value = value
        self.allowed = allowed
        super().__init__(f"Invalid value {value!r} for configuration {key}: {allowed}")


# --------------------------------------------------------------------------- value parsers
Parser = Callable[[str], Any]


def _parse_int(text: str) -> int:
    return int(text.strip())


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError("expected true or false")


def _parse_str(text: str) -> str:
    return text.strip()


def _parse_optional_str(text: str) -> str | None:
    stripped = text.strip()
    return stripped or None


def _parse_optional_int(text: str) -> int | None:
    stripped = text.strip()
    return int(stripped) if stripped else None


# ----------------------------------------------------------------------------- validators
Validator = Callable[[Any], str | None]
"""Returns None when the value is allowed, else a description of what is allowed."""


def at_least(minimum: int) -> Validator:
    def check(value: Any) -> str | None:
        if value is None or value >= minimum:
            return None
        return f"must be at least {minimum}"

    check.__doc__ = f"Value must be at least {minimum}"
    return check


def between(low: int, high: int) -> Validator:
    def check(value: Any) -> str | None:
        if value is None or low <= value <= high:
            return None
        return f"must be between {low} and {high}"

    check.__doc__ = f"Value must be between {low} and {high}"
    return check


def one_of(*choices: str) -> Validator:
    def check(value: Any) -> str | None:
        if value is None or value in choices:
            return None
        return "must be one of " + ", ".join(choices)

    check.__doc__ = "One of " + ", ".join(choices)
    return check


def _comma_list(allowed: frozenset[str]) -> Validator:
    def check(value: Any) -> str | None:
        items = [v.strip() for v in str(value).split(",") if v.strip()]
        if not items or any(v not in allowed for v in items):
            return "must be a comma-separated list of " + ", ".join(sorted(allowed))
        return None

    check.__doc__ = "Comma-separated list of " + ", ".join(sorted(allowed))
    return check


_any_protocols = _comma_list(frozenset({"classic", "consumer"}))


def _protocol_list(value: Any) -> str | None:
    """Comma-separated list of classic, consumer; classic is required (as in Kafka)"""
    problem = _any_protocols(value)
    if problem is None and "classic" not in [v.strip() for v in str(value).split(",")]:
        return "must contain classic"
    return problem
_assignor_list = _comma_list(frozenset({"uniform", "range"}))


def _any(_value: Any) -> str | None:
    return None


def _cleanup_policy(value: Any) -> str | None:
    """A list of delete, compact"""
    parts = [p.strip() for p in str(value).split(",") if p.strip()]
    if parts and all(p in ("delete", "compact") for p in parts):
        return None
    return "must be a list of delete, compact"


def _ratio(value: Any) -> str | None:
    """Value must be between 0 and 1"""
    return None if 0 <= value <= 1 else "must be between 0 and 1"


def setting(
    key: str,
    default: Any,
    doc: str,
    *,
    parser: Parser = _parse_int,
    validator: Validator = _any,
    type_name: str = "int",
    group: str = "Network",
    dynamic: bool = False,
) -> Any:
    """Declare one configuration attribute with its Kafka key, default, validation and docs.

    ``dynamic``: the key can be changed while the broker runs (IncrementalAlterConfigs on a
    BROKER resource, :mod:`.dynamic`), and the broker applies the new value at once."""
    return attrs.field(
        default=default,
        metadata={
            "key": key,
            "doc": doc,
            "parser": parser,
            "validator": validator,
            "type_name": type_name,
            "group": group,
            "dynamic": dynamic,
        },
    )


def _str_setting(key: str, default: str | None, doc: str, **kw: Any) -> Any:
    optional = default is None
    return setting(
        key,
        default,
        doc,
        parser=_parse_optional_str if optional else _parse_str,
        type_name="string",
        **kw,
    )


def _bool_setting(key: str, default: bool, doc: str, **kw: Any) -> Any:
    return setting(key, default, doc, parser=_parse_bool, type_name="boolean", **kw)


def _long(key: str, default: int | None, doc: str, **kw: Any) -> Any:
    parser = _parse_optional_int if default is None else _parse_int
    return setting(key, default, doc, parser=parser, type_name="long", **kw)



_TYPE_LIMITS = {"int": INT_MAX, "long": LONG_MAX}


def _convert(key: str, field: attrs.Attribute[Any], text: str) -> Any:
    meta = field.metadata
    try:
        value = meta["parser"](text)
    except ValueError:
        raise ConfigError(key, text, f"expected a value of type {meta['type_name']}") from None
    limit = _TYPE_LIMITS.get(meta["type_name"])
    if limit is not None and value is not None and not -limit - 1 <= value <= limit:
        # Kafka's ConfigDef parses INT and LONG with Integer/Long.parseInt: "Not a number of
        # type INT". Accepting more would start 10^23 threads or overflow a Java client.
        raise ConfigError(key, text.strip(), f"expected a value of type {meta['type_name']} "
                          f"(at most {limit})")
    problem = meta["validator"](value)
    if problem:
        raise ConfigError(key, value, problem)
    return value
