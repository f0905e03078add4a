"""What the pre-scan's fast check and the response encoder share: Python source generated from
kio's schema metadata, one flat function per (struct, nullable), compiled once per schema."""

from __future__ import annotations

from typing import Any


class StructCodegen:
    """Collects generated functions; a subclass's ``entity`` writes one per struct."""

    #: Generated function names are this prefix and a number.
    PREFIX = "_f"

    def __init__(self) -> None:
        self.functions: dict[tuple[type, bool], str] = {}
        self.sources: list[str] = []

    def entity(self, schema: type, nullable: bool = False) -> str:
        """The name of ``schema``'s function, its source added on first use."""
        raise NotImplementedError

    def reserve(self, schema: type, nullable: bool) -> tuple[str, bool]:
        """The function name for ``(schema, nullable)``, and whether it is new (its source is
        still to be written: structs refer to each other, so the name comes first)."""
        key = (schema, nullable)
        name = self.functions.get(key)
        if name is not None:
            return name, False
        name = self.functions[key] = f"{self.PREFIX}{len(self.functions)}"
        return name, True

    def build(self, schema: type, namespace: dict[str, Any]) -> Any:
        """Generate ``schema``'s function (and those it calls), execute them in ``namespace``,
        and return the entry point."""
        entry = self.entity(schema)
        exec("\n\n".join(self.sources), namespace)  # noqa: S102 - our own generated code
        return namespace[entry]
