"""Turning the command line's PATH arguments into the list of log files Spark reads.

A PATH is a file, a glob, or a directory. A directory stands for the log files directly inside it,
rotated ones included (``broker.log``, ``broker.log.1``, ... as ``logging.file.max.bytes`` rotation
leaves them, and ``.jsonl``/``.json`` files, optionally gzipped). Paths with a URL scheme
(``hdfs://``, ``s3a://``, ``file://``) are passed to Spark unchanged, for cluster runs.

No input file makes ``trio_broker analyze`` fail (docs/logging.md). Two steps on the driver:

* :func:`expand_paths` turns the PATHs into files. A PATH that stands for nothing (no such file,
  a pattern matching no file, a directory holding no log file) fails the run with exit 2 only
  when *no* PATH stands for anything: then it is a typo, and nothing could be analysed. Among
  other PATHs that do, it is kept, and :func:`prepare_inputs` reports it as an unusable file
  (``no such file``, ``the pattern matches no file``, ``a directory``). Entries that exist but
  cannot be read (a symlink loop, an unreadable file or directory, a directory where a file was
  expected) are always kept as files, to be reported as unusable, never raised.
* :func:`prepare_inputs` checks each local file before Spark reads it and hands Spark only the
  usable ones, each under a name Hadoop can take; the others go to ``summary.json``'s
  ``unusable_files`` with the reason. An empty file is usable (zero lines). URLs are not checked
  (``spark.sql.files.ignoreCorruptFiles``/``ignoreMissingFiles`` are the backstop there).
"""

from __future__ import annotations

import bz2
import errno
import glob
import gzip
import os
import re
import stat
import tempfile
import zlib
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs

#: Names of log files inside a directory: ``x.log``, ``x.log.3``, ``x.jsonl``, ``x.json.gz`` ...
LOG_FILE_RE = re.compile(r"^[^.].*\.(log|jsonl|ndjson|json)(\.\d+)?(\.gz)?$")
_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_RELATIVE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def is_url(name: str) -> bool:
    """Whether an input is a URL (``hdfs://``, ``s3a://``, ``file://``) rather than a local path."""
    return _SCHEME_RE.match(name) is not None


class InputError(ValueError):
    """A PATH argument matched no log file, or a time bound could not be parsed."""


def _rotation_key(path: Path) -> tuple[str, int]:
    # Oldest first: broker.log.5 ... broker.log.1, then broker.log (the live file).
    match = re.search(r"\.(\d+)(\.gz)?$", path.name)
    base = path.name[: match.start()] if match else path.name
    return (base, -int(match.group(1)) if match else 0)


def log_files_in(directory: Path) -> list[Path]:
    """The log files directly inside ``directory``, each rotation set oldest first.

    Every entry with a log file's name is listed, readable or not (a symlink loop, a
    subdirectory named ``x.log``): :func:`prepare_inputs` reports those as unusable files.
    """
    found = [p for p in directory.iterdir() if LOG_FILE_RE.match(p.name)]
    return sorted(found, key=_rotation_key)


def _absolute(path: Path) -> str:
    """``path`` resolved (symlinks followed), or only made absolute when it cannot be
    resolved (a symlink loop: Python 3.11's ``resolve`` raises ``RuntimeError`` there)."""
    try:
        return str(path.resolve())
    except (OSError, RuntimeError):
        return os.path.abspath(path)


def _exists(path: Path) -> bool:
    """Whether anything is at ``path``, a broken or looping symlink included."""
    try:
        path.lstat()
    except OSError:
        return False
    return True


def expand_paths(paths: Sequence[str]) -> list[str]:
    """Every file the PATH arguments stand for, without duplicates, in a stable order.

    Raises :class:`InputError` only when no PATH stands for anything (see the module's
    docstring); a PATH standing for nothing among others that do is returned as given, for
    :func:`prepare_inputs` to report as an unusable file.
    """
    result: list[str] = []
    seen: set[str] = set()
    problems: list[tuple[str, str]] = []  # (PATH, why it stands for nothing)

    def add(items: Iterable[str]) -> None:
        for item in items:
            if item not in seen:
                seen.add(item)
                result.append(item)

    def directory_files(directory: Path) -> list[Path] | None:
        try:
            return log_files_in(directory)
        except OSError:
            return None  # unreadable: reported by prepare_inputs

    for raw in paths:
        if is_url(raw):
            add([raw])
            continue
        path = Path(raw).expanduser()
        if path.is_dir():
            files = directory_files(path)
            if files is None:
                add([_absolute(path)])  # an unreadable directory: an unusable input
            elif not files:
                problems.append((raw, "directory holds no log files (*.log, *.log.N, *.jsonl)"))
            else:
                add(_absolute(p) for p in files)
        elif _exists(path):
            add([_absolute(path)])  # a file, or a symlink loop, a FIFO...: checked later
        elif glob.has_magic(raw):
            matches = sorted(Path(m) for m in glob.glob(str(path)))
            found: list[Path] = []
            for match in matches:
                inside = directory_files(match) if match.is_dir() else None
                if inside is not None:
                    found.extend(inside)
                else:  # a file, or an unreadable directory: checked later
                    found.append(match)
            if not found:
                problems.append((raw, "the pattern matches no file"))
            add(_absolute(p) for p in found)
        else:
            problems.append((raw, "no such file or directory"))
    if problems and not result:
        raise InputError("; ".join(f"{raw}: {why}" for raw, why in problems))
    add(raw for raw, _ in problems)
    return result


# -- checking the files before Spark reads them ---------------------------------------------

#: Characters Hadoop takes in a local path as they are: any other (``:`` breaks its URIs,
#: ``{}[]*?\`` are glob characters, ``%``, spaces and non-ASCII letters are escaped) has the file
#: handed to Spark through a symlink with a name made of these only (so is a file whose name
#: starts with ``_`` or ``.``, which Spark skips as hidden).
_SAFE_PATH_RE = re.compile(r"^[A-Za-z0-9._/+-]+$")
_UNSAFE_CHAR_RE = re.compile(r"[^A-Za-z0-9._+-]")
_CHUNK = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"
_BZIP2_MAGIC = b"BZh"


@attrs.frozen
class PreparedInputs:
    """The input files as Spark is to read them (see :func:`prepare_inputs`)."""

    #: The paths to hand to Spark: the usable files, URLs as given.
    readable: list[str]
    #: Spark's name of each local file it reads (``_metadata.file_path``: a ``file:`` URI) ->
    #: the caller's name for it.
    display: dict[str, str]
    #: The caller's name of each file Spark is not given -> why.
    unusable_files: dict[str, str]
    #: Where the symlinks with safe names are (the caller removes it at the end).
    work: Path


def spark_file_uri(path: str) -> str:
    """Spark's ``_metadata.file_path`` of a local absolute path made of safe characters."""
    return "file:" + path


def _is_gzip_name(name: str) -> bool:
    return name.lower().endswith(".gz")


def _is_bzip2_name(name: str) -> bool:
    return name.lower().endswith(".bz2")


def _check_compressed(path: str) -> str | None:
    """Why the ``.gz``/``.bz2`` file at ``path`` cannot be decompressed to its end (None when
    it can). The whole file is decompressed in chunks and the output dropped: one pass over
    the compressed input files (and only those) before Spark reads them, for the certainty
    that Spark's read will not fail half-way. Python's gzip reader, like Hadoop's gzip codec,
    reads concatenated members."""
    gzip_file = _is_gzip_name(path)
    kind = "gzip" if gzip_file else "bzip2"
    with open(path, "rb") as raw:
        head = raw.read(3)
        if not head:
            return None  # empty: zero lines (Hadoop's codecs read none either)
        if gzip_file and head[:2] != _GZIP_MAGIC:
            return "not gzip"
        if not gzip_file and head != _BZIP2_MAGIC:
            return "not bzip2"
        raw.seek(0)
        opened: Any = (gzip.GzipFile(fileobj=raw, mode="rb") if gzip_file
                       else bz2.BZ2File(raw, mode="rb"))
        try:
            with opened as stream:
                while stream.read(_CHUNK):
                    pass
        except EOFError:
            return f"truncated {kind}"
        except (OSError, ValueError, zlib.error) as exc:
            return f"corrupt {kind}: {exc}"
    return None


def _safe_name(index: int, name: str) -> str:
    """A name Hadoop takes for the ``index``-th input ``name`` (its suffixes, ``.gz``
    included, kept so that the codec is still picked by the name)."""
    return f"{index:05d}-{_UNSAFE_CHAR_RE.sub('_', name).lstrip('.') or 'log'}"


def _why_unusable(path: str) -> str | None:
    """Why the local file ``path`` cannot be read (None when it can)."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return "the pattern matches no file" if glob.has_magic(path) else "no such file"
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    try:
        info = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symlink loop"
        if exc.errno == errno.ENOENT:
            return "no such file (a broken symlink)"
        return f"unreadable: {exc.strerror or exc}"
    if stat.S_ISDIR(info.st_mode):
        try:
            holds = bool(log_files_in(Path(path)))
        except OSError as exc:
            return f"a directory, unreadable: {exc.strerror or exc}"
        return "a directory" + ("" if holds else " holding no log files")
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"  # a FIFO or a device: Spark would block or read forever
    try:
        with open(path, "rb") as stream:
            stream.read(1)
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    if _is_gzip_name(path) or _is_bzip2_name(path):
        try:
            return _check_compressed(path)
        except OSError as exc:
            return f"unreadable: {exc.strerror or exc}"
    return None


def prepare_inputs(files: Sequence[str], work: Path) -> PreparedInputs:
    """Check each input file on the driver before Spark reads it (see the module docstring).

    A local file that cannot be read whole (``no such file``, ``a directory``, ``symlink loop``,
    ``unreadable: ...``, ``not a regular file``, ``not gzip``, ``truncated gzip``,
    ``corrupt gzip: ...``, the same for ``.bz2``) goes to ``unusable_files``. Every ``.gz`` and
    ``.bz2`` file is decompressed once, in chunks, to be sure of it: a pass over the compressed
    inputs only, before Spark's. A usable file whose path holds a character Hadoop does not take
    as it is (``:``, glob characters, spaces, ``%``, non-ASCII letters) is handed to Spark as a
    symlink with a safe name in ``work`` (created when needed). URLs pass through unchecked.
    """
    readable: list[str] = []
    display: dict[str, str] = {}
    unusable: dict[str, str] = {}
    links: Path | None = None
    for index, name in enumerate(files):
        if is_url(name):
            readable.append(name)
            continue
        path = os.path.abspath(os.path.expanduser(name))
        why = _why_unusable(path)
        if why is not None:
            unusable[name] = why
            continue
        if not _hadoop_safe(path):
            links = links or _link_directory(work)
            link = links / _safe_name(index, os.path.basename(path))
            try:
                links.mkdir(parents=True, exist_ok=True)
                link.unlink(missing_ok=True)
                link.symlink_to(path)
            except OSError as exc:
                unusable[name] = f"cannot link it under a safe name: {exc.strerror or exc}"
                continue
            path = str(link)
        readable.append(path)
        display[spark_file_uri(path)] = name
    return PreparedInputs(readable, display, unusable,
                          links or Path(os.path.abspath(work)))


def _hadoop_safe(path: str) -> bool:
    """Whether Spark reads the local absolute ``path`` as it is: safe characters only, and a
    name not starting with ``_`` or ``.`` (Spark skips such files as hidden, even when named
    explicitly: zero lines, silently)."""
    return (_SAFE_PATH_RE.match(path) is not None
            and not os.path.basename(path).startswith(("_", ".")))


def _link_directory(work: Path) -> Path:
    """``work`` (absolute) when its own path is safe for Hadoop, else a fresh temporary one."""
    absolute = Path(os.path.abspath(work))
    if _SAFE_PATH_RE.match(str(absolute)):
        return absolute
    return Path(tempfile.mkdtemp(prefix="trio-broker-inputs-"))


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
