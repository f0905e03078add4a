"""The event reference in ``docs/logging.md``, generated from :mod:`.events`.

The part of ``docs/logging.md`` between the two marker comments is rewritten from the declaration
by ``python -m trio_broker.observability.reference docs/logging.md``; a test fails when it is out
of date, so the documented schema is always the one the broker emits.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .events import COMMON_FIELDS, EVENTS, REQUIRED_COMMON_FIELDS, SCHEMA_VERSION

BEGIN = "<!-- BEGIN EVENT REFERENCE (generated from trio_broker/observability/events.py) -->"
END = "<!-- END EVENT REFERENCE -->"


def render_reference() -> str:
    """The generated Markdown: schema version, common fields, then one table per event."""
    out = [BEGIN, "", f"Schema version: **{SCHEMA_VERSION}**. {len(EVENTS)} events.", "",
           "Fields marked *optional* may be missing from a line (readers must cope); the others "
           "are on every line of the event.", "",
           "### Fields on every line", "", "| field | type | presence |", "| --- | --- | --- |"]
    out += [f"| `{name}` | {type_name} | "
            f"{'always' if name in REQUIRED_COMMON_FIELDS else 'optional'} |"
            for name, type_name in COMMON_FIELDS.items()]
    out += ["", "### Events", ""]
    out += [f"- [`{name}`](#event-{name.replace('_', '-')})" for name in EVENTS]
    for name, spec in EVENTS.items():
        out += ["", f"#### `{name}`", "", f'<a id="event-{name.replace("_", "-")}"></a>', "",
                f"{spec.description} Level: `{spec.level}`.", ""]
        if spec.fields:
            out += ["| field | type | presence |", "| --- | --- | --- |"]
            out += [f"| `{field}` | {type_name} | "
                    f"{'always' if field in spec.required else '*optional*'} |"
                    for field, type_name in spec.fields.items()]
        else:
            out.append("No fields besides the common ones.")
    out += ["", END]
    return "\n".join(out)


def update_document(text: str) -> str:
    """``text`` with the part between the markers replaced by :func:`render_reference`."""
    start = text.find(BEGIN)
    stop = text.find(END)
    if start < 0 or stop < start:
        raise ValueError("the document lacks the event reference markers")
    return text[:start] + render_reference() + text[stop + len(END):]


def main(argv: list[str]) -> int:
    """Rewrite the reference in each named Markdown file (``--check``: only compare)."""
    check = "--check" in argv
    paths = [Path(a) for a in argv if a != "--check"] or [Path("docs/logging.md")]
    stale = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        updated = update_document(text)
        if updated != text:
            stale.append(path)
            if not check:
                path.write_text(updated, encoding="utf-8")
    if check and stale:
        print("out of date: " + ", ".join(map(str, stale)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
