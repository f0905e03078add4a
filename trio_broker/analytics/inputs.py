"""Turning the command line's PATH arguments into the list of log files Spark reads.

A PATH is a file, a glob, or a directory. A directory stands for the log files directly inside it,
rotated ones included (``broker.log``, ``broker.log.1``, ... as ``logging.file.max.bytes`` rotation
leaves them, and ``.jsonl``/``.json`` files, optionally gzipped). Paths with a URL scheme
(``hdfs://``, ``s3a://``, ``file://``) are passed to Spark unchanged, for cluster runs.
"""

from __future__ import annotations

import glob
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

#: Names of log files inside a directory: ``x.log``, ``x.log.3``, ``x.jsonl``, ``x.json.gz`` ...
LOG_FILE_RE = re.compile(r"^[^.].*\.(log|jsonl|ndjson|json)(\.\d+)?(\.gz)?$")
_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_RELATIVE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class InputError(ValueError):
    """A PATH argument matched no log file, or a time bound could not be parsed."""


def _rotation_key(path: Path) -> tuple[str, int]:
    # Oldest first: broker.log.5 ... broker.log.1, then broker.log (the live file).
    match = re.search(r"\.(\d+)(\.gz)?$", path.name)
    base = path.name[: match.start()] if match else path.name
    return (base, -int(match.group(1)) if match else 0)


def log_files_in(directory: Path) -> list[Path]:
    """The log files directly inside ``directory``, each rotation set oldest first."""
    found = [p for p in directory.iterdir() if p.is_file() and LOG_FILE_RE.match(p.name)]
    return sorted(found, key=_rotation_key)


def expand_paths(paths: Sequence[str]) -> list[str]:
    """Every file the PATH arguments stand for, without duplicates, in a stable order."""
    result: list[str] = []
    seen: set[str] = set()

    def add(items: Iterable[str]) -> None:
        for item in items:
            if item not in seen:
                seen.add(item)
                result.append(item)

    for raw in paths:
        if _SCHEME_RE.match(raw):
            add([raw])
            continue
        path = Path(raw).expanduser()
        if path.is_dir():
            files = log_files_in(path)
            if not files:
                raise InputError(f"{raw}: directory holds no log files (*.log, *.log.N, *.jsonl)")
            add(str(p.resolve()) for p in files)
        elif path.is_file():
            add([str(path.resolve())])
        elif glob.has_magic(raw):
            matches = sorted(Path(m) for m in glob.glob(str(path)))
            files = [m for m in matches if m.is_file()]
            for directory in (m for m in matches if m.is_dir()):
                files.extend(log_files_in(directory))
            if not files:
                raise InputError(f"{raw}: the pattern matches no file")
            add(str(p.resolve()) for p in files)
        else:
            raise InputError(f"{raw}: no such file or directory")
    return result


def parse_time(text: str, *, now: datetime | None = None) -> datetime:
    """An aware UTC datetime from ISO 8601 (naive means UTC) or ``30m``/``2h``/``1d`` ago."""
    current = now if now is not None else datetime.now(UTC)
    match = _RELATIVE_RE.match(text.strip())
    if match:
        return current - timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InputError(
            f"{text!r}: not an ISO 8601 time (2024-05-01T12:00:00Z) nor a span ago (30m, 2h, 1d)"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)
