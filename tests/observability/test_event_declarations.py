"""The log schema contract, broker side: what the code emits is what events.py declares.

Strict logging (tests/conftest.py) catches undeclared events and fields on the paths tests run;
this file also reads every ``emit(...)`` call in the source, so a path no test runs cannot slip
through, and checks that docs/logging.md documents the current declaration.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from trio_broker.observability import log
from trio_broker.observability.events import (
    COMMON_FIELDS,
    EVENTS,
    SCHEMA_VERSION,
    all_fields,
    field_problems,
)
from trio_broker.observability.reference import render_reference, update_document

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "trio_broker"
TYPES = {"string", "long", "double", "boolean"}
SAMPLE = {"string": "text", "long": 7, "double": 1.5, "boolean": True}
PYTHON_TYPES = {"string": str, "long": int, "double": float, "boolean": bool}


def _calls(name: str) -> list[tuple[Path, ast.Call]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.id if isinstance(func, ast.Name) else (
                    func.attr if isinstance(func, ast.Attribute) else None)
                if called == name:
                    found.append((path, node))
    return found


def _dict_keys_of(path: Path, call: ast.Call) -> list[str]:
    """The string keys ``emit_fields``'s second argument gets in the function around the call:
    its dict literal's, those set by ``name["key"] = ...``, and the timing keys it is updated
    with (``Request.timings_ms``: declared fields of every request line)."""
    if len(call.args) < 2 or not isinstance(call.args[1], ast.Name):
        return []
    name = call.args[1].id
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    functions = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)]
    for function in sorted(functions, key=lambda f: f.lineno, reverse=True):  # innermost first
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if not function.lineno <= call.lineno <= (function.end_lineno or 0):
            continue
        keys: list[str] = []
        for node in ast.walk(function):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                    and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)):
                keys += [k.value for k in node.value.keys
                         if isinstance(k, ast.Constant) and isinstance(k.value, str)]
            elif (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
                  and node.value.id == name and isinstance(node.slice, ast.Constant)):
                keys.append(node.slice.value)
        return keys
    return []


def test_every_emit_in_the_source_names_a_declared_event_and_fields() -> None:
    problems = []
    emits = [(p, c) for p, c in _calls("emit") if p.name != "log.py" or c.args]
    for path, call in emits:
        where = f"{path.relative_to(ROOT)}:{call.lineno}"
        if not call.args or not (isinstance(call.args[0], ast.Constant)
                                 and isinstance(call.args[0].value, str)):
            problems.append(f"{where}: the event name must be a string literal")
            continue
        event = call.args[0].value
        if event not in EVENTS:
            problems.append(f"{where}: event {event!r} is not declared in events.py")
            continue
        allowed = set(all_fields(event))
        for keyword in call.keywords:
            if keyword.arg is not None and keyword.arg not in allowed:
                problems.append(f"{where}: {event!r} has no declared field {keyword.arg!r}")
    # emit_fields("event", fields): the fields' dict literal (a name assigned one in the same
    # function) and the keys it later gains by subscript are checked the same way.
    for path, call in _calls("emit_fields"):
        if path.name == "log.py":
            continue
        where = f"{path.relative_to(ROOT)}:{call.lineno}"
        if not (call.args and isinstance(call.args[0], ast.Constant)
                and isinstance(call.args[0].value, str) and call.args[0].value in EVENTS):
            problems.append(f"{where}: the event name must be a declared string literal")
            continue
        event = call.args[0].value
        keys = _dict_keys_of(path, call)
        if not keys:
            problems.append(f"{where}: emit_fields needs a dict literal assigned in its function")
        allowed = set(all_fields(event))
        problems += [f"{where}: {event!r} has no declared field {key!r}"
                     for key in keys if key not in allowed]
        emits.append((path, call))
    assert not problems, "\n".join(problems)
    names = {c.args[0].value for _, c in emits if isinstance(c.args[0], ast.Constant)}
    # The checks above must have had something to check: the front end's core events.
    assert {"request", "connection_accepted", "connection_closed"} <= names, sorted(names)


def test_fields_bound_to_a_context_are_declared_somewhere() -> None:
    declared = set(COMMON_FIELDS).union(*(spec.fields for spec in EVENTS.values()))
    problems = [f"{p.relative_to(ROOT)}:{c.lineno}: bound field {k.arg!r} is in no event"
                for p, c in _calls("bound") for k in c.keywords
                if k.arg is not None and k.arg not in declared]
    assert not problems, "\n".join(problems)


def test_declaration_is_well_formed() -> None:
    assert isinstance(SCHEMA_VERSION, int) and SCHEMA_VERSION >= 1
    assert set(COMMON_FIELDS) >= {"timestamp", "level", "event", "broker"}
    types: dict[str, dict[str, list[str]]] = {}
    for name, spec in EVENTS.items():
        assert name == spec.name and name.isidentifier() and name == name.lower(), name
        assert spec.description.strip(), name
        assert spec.level in {"debug", "info", "warning", "error"}, name
        assert not set(spec.fields) & set(COMMON_FIELDS), f"{name} redeclares a common field"
        for field, type_name in spec.fields.items():
            assert type_name in TYPES, (name, field, type_name)
            types.setdefault(field, {}).setdefault(type_name, []).append(name)
    # One Spark column per field name: a name must keep one type across all events.
    conflicts = {f: t for f, t in types.items() if len(t) > 1}
    assert not conflicts, f"fields declared with different types (rename one): {conflicts}"
    for field in ("api", "api_version", "correlation_id", "client_id", "client_software_name",
                  "client_software_version", "connection_id", "listener", "security_protocol",
                  "principal", "processor", "request_bytes", "response_bytes", "error",
                  "request_queue_ms", "local_ms", "remote_ms", "throttle_ms",
                  "response_queue_ms", "send_ms", "total_ms"):
        assert field in EVENTS["request"].fields, field
    for field in ("reason", "ip", "listener"):
        assert field in EVENTS["connection_rejected"].fields


def test_every_event_renders_with_its_declared_types(log_events: Any) -> None:
    """Each event, with every field set, comes out of the JSON renderer with declared types."""
    for name, spec in EVENTS.items():
        log.emit(name, **{f: SAMPLE[t] for f, t in spec.fields.items()})
    assert log.schema_violations() == []
    lines = log_events.lines()
    assert [line["event"] for line in lines] == list(EVENTS)
    for line in lines:
        fields = all_fields(line["event"])
        assert set(line) <= set(fields), line["event"]
        assert set(COMMON_FIELDS) <= set(line), line["event"]
        for field, value in line.items():
            assert isinstance(value, PYTHON_TYPES[fields[field]]), (line["event"], field)
        assert field_problems(line["event"], line) == []
        assert line["broker"] == 1 and line["schema_version"] == SCHEMA_VERSION
        assert line["timestamp"].endswith("Z")


def test_strict_mode_records_undeclared_events_and_fields() -> None:
    log.emit("no_such_event", x=1)
    log.emit("broker_stopped", uptime_s=1.0, not_a_field=2)
    found = [str(v) for v in log.schema_violations()]
    assert len(found) == 2
    assert "no_such_event" in found[0] and "not_a_field" in found[1]


def test_docs_logging_md_documents_the_current_declaration() -> None:
    doc = ROOT / "docs" / "logging.md"
    text = doc.read_text(encoding="utf-8")
    assert update_document(text) == text, (
        "docs/logging.md is out of date: run "
        "`python -m trio_broker.observability.reference docs/logging.md`")
    reference = render_reference()
    for name in EVENTS:
        assert f"#### `{name}`" in reference


@pytest.mark.parametrize("broken", ["no markers at all", "<!-- END EVENT REFERENCE -->"])
def test_update_document_needs_the_markers(broken: str) -> None:
    with pytest.raises(ValueError, match="markers"):
        update_document(broken)


def test_field_problems_names_undeclared_and_wrongly_typed_fields() -> None:
    assert field_problems("request", {"api": "Produce", "api_version": 9, "total_ms": 3,
                                      "error": None, "broker": 1}) == []
    assert field_problems("request", {"api_version": True, "total_ms": "slow", "nope": 1}) == [
        "event 'request' field 'api_version' is long, got bool True",
        "event 'request' field 'total_ms' is double, got str 'slow'",
        "event 'request' carries undeclared field 'nope'",
    ]
    assert field_problems("listener_bound", {"control_plane": 1}) == [
        "event 'listener_bound' field 'control_plane' is boolean, got int 1"]
    assert field_problems("no_such_event", {}) == [
        "event 'no_such_event' is not declared in observability/events.py"]
