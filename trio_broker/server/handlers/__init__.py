"""API handler modules; importing this package registers all of them (see ``registry``)."""

from . import api_versions, metadata  # noqa: F401
