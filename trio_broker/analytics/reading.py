"""Reading the logs once, and accounting for every line: why a line is unusable, counts per
reason and event, samples with file and line number."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import attrs

from trio_broker.observability.events import EVENTS

from .inputs import is_url
from .schema import CORRUPT_RECORD, log_schema

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import Column, DataFrame, SparkSession

# -- reading ------------------------------------------------------------------------------------

#: Bookkeeping columns :func:`read_logs` adds to every line: the file, the byte offset of the
#: split it was read in, the Spark partition and the row id within it (together they give the
#: line number of a sample), the reason a line is unusable (null when it is usable) and, for
#: unusable lines only, the start of the line's text.
FILE, BLOCK, PART, ROW, PROBLEM, TEXT = "_file", "_block", "_part", "_row", "problem", "_text"
#: Problems that are no line at all (not counted): blank lines.
BLANK = "blank"
#: Fields an event's line cannot be used without, beyond ``event`` and ``timestamp``: the
#: ``required`` fields of events.py.
REQUIRED_FIELDS: Mapping[str, tuple[str, ...]] = {
    name: spec.required for name, spec in EVENTS.items() if spec.required}
_SAMPLE_CHARS = 160
#: Samples kept per problem.
_SAMPLES = 5
#: The text kept of an unusable line (enough to name the field of the wrong type).
_KEPT_CHARS = 8192
WRONG_TYPE = "wrong type"
#: JSON's whitespace within a line (Spark's trim functions take only spaces by default).
_JSON_SPACE = " \t\r"
#: A usable line's ``ts`` falls in these years (``bad timestamp`` otherwise): a broker writes
#: no time before the Unix epoch, and Python's datetime (a collected table, the report) ends
#: with year 9999. Spark parses a JSON number such as ``12345`` as that year.
MIN_YEAR, MAX_YEAR = 1970, 9999
#: Duration fields (milliseconds): NaN, infinite, negative or above :data:`MAX_MS` makes a line
#: unusable, ``out of range: FIELD`` (the request's stages are added, from request_tables).
DURATION_FIELDS: tuple[str, ...] = ("total_ms", "duration_ms", "muted_ms", "throttle_ms")
#: The bound of a duration: 10^12 ms is about 31 years, beyond any real wait, yet far below
#: where sums, averages and charts of such values overflow or lose all precision.
MAX_MS = 1e12
#: Byte counts: negative makes a line unusable, ``out of range: FIELD``. Not ``size`` of
#: ``invalid_request``: that is the length a client's frame claimed, negative ones included
#: (Kafka's ``InvalidReceiveException`` for a size below 0).
BYTE_FIELDS: tuple[str, ...] = ("request_bytes", "response_bytes")
OUT_OF_RANGE = "out of range"


def read_logs(spark: SparkSession, files: Sequence[str],
              columns: Sequence[str] | None = None) -> DataFrame:
    """Every line of ``files`` under the declared schema, plus ``ts`` and why it is unusable.

    With ``columns``, only those fields (plus ``timestamp``, ``event`` and the required fields)
    are parsed and type-checked: a wrongly typed field outside them goes unnoticed (the line
    stays usable), which is what ``trio_broker analyze`` does for speed (docs/decisions.md).

    The text is read once by the JVM (``spark.read.text``; gzip included) and parsed with
    ``from_json`` against the schema built from events.py, so nothing runs in Python per line.
    ``problem`` is null for a usable line and otherwise one of: ``blank``, ``not JSON``,
    ``not an object``, ``not a broker event`` (a JSON object without an ``event`` name: another
    program's line), ``unknown event``, ``missing field X``, ``wrong type: X``, ``bad timestamp``.
    Every field is optional except ``event``, ``timestamp`` and :data:`REQUIRED_FIELDS`. A field
    of the wrong type makes the line unusable (a string field takes any JSON value's text, as
    Spark's JSON reader does). ``_corrupt_record`` holds the text of a line that did not parse
    against the schema.
    """
    from pyspark.sql import functions as F

    schema = log_schema(only=columns)
    text = spark.read.text(list(files))
    raw = text.select(
        F.col("_metadata.file_path").alias(FILE), F.col("_metadata.file_block_start").alias(BLOCK),
        F.spark_partition_id().alias(PART), F.monotonically_increasing_id().alias(ROW),
        F.col("value"),
        F.from_json(F.col("value"), schema, {"mode": "PERMISSIVE",
                                             "columnNameOfCorruptRecord": CORRUPT_RECORD})
        .alias("_j"))
    fields = [f.name for f in schema.fields]
    parsed = raw.select(FILE, BLOCK, PART, ROW, "value",
                        *(F.col("_j").getField(name).alias(name) for name in fields))
    parsed = parsed.withColumn("ts", F.try_to_timestamp(F.col("timestamp")))
    problem = problem_column(fields)
    return (parsed.withColumn(PROBLEM, problem)
            .withColumn(TEXT, F.when(F.col(PROBLEM).isNotNull() & (F.col(PROBLEM) != BLANK),
                                     F.substring(F.col("value"), 1, _KEPT_CHARS)))
            .drop("value"))


def problem_column(fields: Sequence[str]) -> Column:
    """Why a parsed line is unusable (null when usable); see :func:`read_logs`.

    A line with a wrongly typed field gets :data:`WRONG_TYPE` here; :func:`wrong_field_column`
    names the field, for those lines only (its expression is large: one test per field).
    """
    from pyspark.sql import functions as F

    value = F.col("value")
    event = F.col("event")
    corrupt = F.col(CORRUPT_RECORD).isNotNull()
    known = event.isin(*EVENTS)
    # Every expensive test sits in one branch only, evaluated for the rare bad lines: an
    # expression used in two branches would be computed for every line (common
    # subexpression elimination hoists it).
    space = F.lit(_JSON_SPACE)
    rare = (F.when(F.trim(value, space) == "", F.lit(BLANK))
            .when(F.get_json_object(value, "$").isNull(), F.lit("not JSON"))
            .when(~F.ltrim(value, space).startswith("{"), F.lit("not an object"))
            .when(event.isNull(), F.lit("not a broker event"))
            .when(~known, F.lit("unknown event"))
            .otherwise(F.lit(WRONG_TYPE)))
    # The first character is a cheap test; only a line not starting with "{" pays for the
    # ltrim (a valid object after spaces or a tab is a usable line, not a rare one).
    not_object_start = (F.substring(value, 1, 1) != "{") & ~F.ltrim(value, space).startswith("{")
    ts = F.col("ts")
    expression = (F.when(corrupt | not_object_start, rare)
                  .when(event.isNull(), F.lit("not a broker event"))
                  .when(~known, F.lit("unknown event"))
                  .when(F.col("timestamp").isNull(), F.lit("missing field timestamp"))
                  .when(ts.isNull(), F.lit("bad timestamp"))
                  # Two comparisons of the timestamp's microseconds, no date arithmetic.
                  .when((ts < _timestamp_literal(datetime(MIN_YEAR, 1, 1, tzinfo=UTC)))
                        | (ts > _timestamp_literal(
                            datetime(MAX_YEAR, 12, 31, 23, 59, 59, 999999, tzinfo=UTC))),
                        F.lit("bad timestamp")))
    for name, required in REQUIRED_FIELDS.items():
        for field in required:
            expression = expression.when((event == name) & F.col(field).isNull(),
                                         F.lit(f"missing field {field}"))
    # One or two comparisons per field, each a test of a primitive value (a null field passes
    # both). In Spark NaN is above every number: "> MAX_MS" catches NaN and +Infinity,
    # "< 0" catches -Infinity.
    present = set(fields)
    for field in duration_fields():
        if field in present:
            value = F.col(field)
            expression = expression.when((value < 0) | (value > MAX_MS),
                                         F.lit(f"{OUT_OF_RANGE}: {field}"))
    for field in BYTE_FIELDS:
        if field in present:
            expression = expression.when(F.col(field) < 0, F.lit(f"{OUT_OF_RANGE}: {field}"))
    return expression


def duration_fields() -> tuple[str, ...]:
    """The fields :func:`problem_column` range-checks as durations: the request's stages and
    :data:`DURATION_FIELDS`."""
    from .request_tables import STAGES  # request_tables imports this module

    return tuple(dict.fromkeys((*STAGES, *DURATION_FIELDS)))


def wrong_field_column(text: Column) -> Column:
    """For a line with a wrongly typed field: ``wrong type: NAME``, NAME the first declared
    field (schema order) that is in the line's text but not in its typed parse."""
    from pyspark.sql import functions as F

    schema = log_schema()
    typed = F.from_json(text, schema, {"mode": "PERMISSIVE",
                                       "columnNameOfCorruptRecord": CORRUPT_RECORD})
    wrong = F.lit(WRONG_TYPE)
    for field in reversed([f.name for f in schema.fields if f.name != CORRUPT_RECORD]):
        wrong = F.when(typed.getField(field).isNull()
                       & F.get_json_object(text, f"$.{field}").isNotNull(),
                       F.lit(f"{WRONG_TYPE}: {field}")).otherwise(wrong)
    return wrong


def valid_events(lines: DataFrame, since: datetime | None = None,
                 until: datetime | None = None) -> DataFrame:
    """The usable lines, optionally restricted to ``since <= ts < until``."""
    from pyspark.sql import functions as F

    events = lines.where(F.col(PROBLEM).isNull())
    if since is not None:
        events = events.where(F.col("ts") >= _timestamp_literal(since))
    if until is not None:
        events = events.where(F.col("ts") < _timestamp_literal(until))
    return events


def of_event(events: DataFrame, name: str) -> DataFrame:
    """The lines of one event."""
    from pyspark.sql import functions as F

    return events.where(F.col("event") == name)


def by_minute(column: str = "ts") -> Column:
    """``column`` truncated to its minute, named ``minute`` (the per-minute tables' key)."""
    from pyspark.sql import functions as F

    return F.date_trunc("minute", F.col(column)).alias("minute")


def _timestamp_literal(moment: datetime) -> Column:
    # Handed to the JVM as text with its offset: a Python datetime literal would go through the
    # driver's local time zone on its way to Spark.
    from pyspark.sql import functions as F

    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return F.lit(aware.astimezone(UTC).isoformat()).cast("timestamp")


def iso_utc(column: Column) -> Column:
    """A timestamp column as ISO 8601 UTC text (``...Z``), formatted by Spark.

    Collecting a timestamp into Python converts it to the driver's local time as a naive
    datetime; formatting it on the JVM side (session time zone UTC) keeps it exact.
    """
    from pyspark.sql import functions as F

    return F.date_format(column, "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'")


def _key(value: Any) -> str:
    """A value as a JSON object key: ``(none)`` for a missing one."""
    return "(none)" if value is None else str(value)


def _display_path(uri: str) -> str:
    from urllib.parse import unquote, urlparse

    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme in ("file", "") else uri


@attrs.frozen
class LineAccounts:
    """What the bookkeeping jobs found about the input lines (see :func:`account_lines`)."""

    overview: list[dict[str, Any]]
    samples: dict[str, list[str]]
    usable_by_file: dict[str, int]
    #: Usable lines per event within ``--since``/``--until`` (events with none left out).
    in_range: dict[str, int] = attrs.field(factory=dict)
    #: Usable lines per ``schema_version`` (``(none)`` for lines without one).
    schema_versions: dict[str, int] = attrs.field(factory=dict)


def account_lines(lines: DataFrame, files: Sequence[str], since: datetime | None = None,
                  until: datetime | None = None,
                  display: Mapping[str, str] | None = None) -> LineAccounts:
    """Counts per (problem, event), up to 5 ``file:line`` samples per problem, usable lines per
    file and per event within ``since``/``until``. Line numbers come from each split's first
    row id and the line counts of the splits before it in the same file (rows of a split are
    contiguous in its partition).

    With ``display`` (:attr:`inputs.PreparedInputs.display`: Spark's name of a file -> the
    caller's), files are named as the caller named them, and ``files`` are the caller's names.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    def shown(uri: str) -> str:
        return _display_path(uri) if display is None else display.get(uri, _display_path(uri))

    in_range = F.col(PROBLEM).isNull()
    if since is not None:
        in_range &= F.col("ts") >= _timestamp_literal(since)
    if until is not None:
        in_range &= F.col("ts") < _timestamp_literal(until)
    version = (F.col("schema_version").cast("string") if "schema_version" in lines.columns
               else F.lit(None).cast("string"))
    bad = F.col(PROBLEM).isNotNull() & (F.col(PROBLEM) != BLANK)
    # Built for unusable lines only: a null ordering skips a usable line at no cost.
    sample = F.when(bad, F.struct(F.col(ROW).alias(ROW),
                                  F.substring(F.col(TEXT), 1, _SAMPLE_CHARS).alias(TEXT)))
    # One job: the counts, and each group's first lines as samples (groups are few: a
    # problem x event x split; unusable lines are rare, so no other pass looks for them).
    counted = lines.groupBy(PROBLEM, "event", PART, FILE, BLOCK,
                            version.alias("_version")).agg(
        F.count(F.lit(1)).alias("n"), F.min(ROW).alias("first_row"),
        iso_utc(F.min("ts")).alias("first"), iso_utc(F.max("ts")).alias("last"),
        F.count(F.when(in_range, 1)).alias("in_range"),
        F.min_by(sample, F.when(bad, F.col(ROW)), _SAMPLES).alias("_samples")).collect()
    events_in_range: dict[str, int] = {}
    versions: dict[str, int] = {}
    for row in counted:
        if row["in_range"]:
            name = _key(row["event"])
            events_in_range[name] = events_in_range.get(name, 0) + row["in_range"]
        if row[PROBLEM] is None:
            versions[_key(row["_version"])] = versions.get(_key(row["_version"]), 0) + row["n"]
    merged: dict[tuple[Any, Any], dict[str, Any]] = {}
    split_rows: dict[tuple[int, str, int], dict[str, Any]] = {}
    for row in counted:
        entry = merged.setdefault((row[PROBLEM], row["event"]), {
            PROBLEM: row[PROBLEM], "event": row["event"], "n": 0, "first": None, "last": None})
        entry["n"] += row["n"]
        for key, pick in (("first", min), ("last", max)):
            if row[key] is not None:
                entry[key] = row[key] if entry[key] is None else pick(entry[key], row[key])
        split = split_rows.setdefault((row[PART], row[FILE], row[BLOCK]), {
            PART: row[PART], FILE: row[FILE], BLOCK: row[BLOCK], "n": 0,
            "first_row": row["first_row"], "usable": 0})
        split["n"] += row["n"]
        split["first_row"] = min(split["first_row"], row["first_row"])
        if row[PROBLEM] is None:
            split["usable"] += row["n"]
    overview = list(merged.values())
    splits = list(split_rows.values())
    # Samples: (problem, file, block, row, part, text, event), the first five of each problem.
    found = [(row[PROBLEM], row[FILE], row[BLOCK], line[ROW], row[PART], line[TEXT],
              row["event"]) for row in counted for line in (row["_samples"] or [])]
    if any(entry[PROBLEM] == WRONG_TYPE for entry in overview):
        # Name the wrong field, for those lines only (rare: a second pass over them alone),
        # and count them per field.
        wrong = (lines.where(F.col(PROBLEM) == WRONG_TYPE)
                 .withColumn(PROBLEM, wrong_field_column(F.col(TEXT))))
        refined = wrong.groupBy(PROBLEM, "event").count().collect()
        overview = [entry for entry in overview if entry[PROBLEM] != WRONG_TYPE]
        overview += [{PROBLEM: row[PROBLEM], "event": row["event"], "n": row["count"],
                      "first": None, "last": None} for row in refined]
        order = Window.partitionBy(PROBLEM).orderBy(FILE, BLOCK, ROW)
        found = [entry for entry in found if entry[0] != WRONG_TYPE] + [
            (row[PROBLEM], row[FILE], row[BLOCK], row[ROW], row[PART], row[TEXT], row["event"])
            for row in (wrong.select(PROBLEM, FILE, BLOCK, PART, ROW, "event",
                                     F.substring(F.col(TEXT), 1, _SAMPLE_CHARS).alias(TEXT))
                        .withColumn("_n", F.row_number().over(order))
                        .where(F.col("_n") <= _SAMPLES).collect())]
    picked: list[tuple[Any, ...]] = []
    for problem in sorted({entry[0] for entry in found}):
        picked += sorted((e for e in found if e[0] == problem),
                         key=lambda e: (e[1], e[2], e[3]))[:_SAMPLES]
    first_line: dict[tuple[int, str, int], tuple[int, int]] = {}
    usable_by_file: dict[str, int] = {
        _display_path(f) if display is None or is_url(f) else f: 0 for f in files}
    by_file: dict[str, list[Any]] = {}
    for split in splits:
        by_file.setdefault(split[FILE], []).append(split)
    for file, parts in by_file.items():
        before = 0
        for split in sorted(parts, key=lambda r: r[BLOCK]):
            first_line[(split[PART], file, split[BLOCK])] = (before, split["first_row"])
            before += split["n"]
        name = shown(file)
        usable_by_file[name] = usable_by_file.get(name, 0) + sum(p["usable"] for p in parts)
    samples: dict[str, list[str]] = {}
    for label, file, block, row_id, part, text, event in picked:
        before, first_row = first_line.get((part, file, block), (0, row_id))
        number = before + row_id - first_row + 1
        text = text or ""
        if label == "unknown event":
            text = f"event {event!r}: {text}"
        samples.setdefault(label, []).append(f"{shown(file)}:{number}: {text}")
    return LineAccounts(overview, samples, usable_by_file, events_in_range, versions)
