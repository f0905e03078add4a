"""``python -m trio_broker.config``: print the configuration reference (docs/configuration.md)."""

from .reference import config_reference_markdown

print(config_reference_markdown())
