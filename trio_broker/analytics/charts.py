"""SVG and HTML primitives for a self-contained page: escaping and formatting values, round
axis and time ticks, bar, stacked, line and per-minute column charts drawn as inline SVG (no
plotting library), and HTML tables.

Generic: nothing here knows the analysis tables or the summary; ``report.py`` builds the page
from them with these.
"""

from __future__ import annotations

import html
import math
import re
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

_PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
            "#ff9da7", "#9c755f", "#bab0ac")
_WIDTH = 720
_MAX_POINTS = 600
_MAX_ROWS = 25
_ISO_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


def _esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)  # nan, inf, -inf (int() of them raises)
        if abs(value) >= 1e15:
            return f"{value:.4g}"  # not a 300-digit number for 1e300
        if value == int(value):
            return f"{int(value):,}" if abs(value) >= 1000 else f"{value:g}"
        return f"{value:,.3f}" if abs(value) < 1000 else f"{value:,.1f}"
    if isinstance(value, int):
        try:
            return f"{value:,}"
        except ValueError:  # beyond Python's int-to-text limit (thousands of digits)
            return f"a {value.bit_length()}-bit integer"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if isinstance(value, str) and _ISO_RE.match(value):
        # 2026-03-14T09:00:00.250000Z -> 2026-03-14 09:00:00.25 (the page says times are UTC)
        day, clock = value[:-1].split("T")
        if "." in clock:  # only a fraction loses its trailing zeros (09:00:10 stays whole)
            clock = clock.rstrip("0").rstrip(".")
        return f"{day} {clock}"
    return str(value)


def _finite(value: Any) -> float | None:
    """``value`` as a finite float, or None (None, NaN, infinities, what is not a number)."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int beyond a float
        return None
    return number if math.isfinite(number) else None


def _num(value: Any) -> float:
    """``value`` as a float for a chart: an int beyond floats as an infinity, None or what is
    not a number as NaN (the charts leave NaN out and clamp infinities)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf
    except (TypeError, ValueError):
        return math.nan


def _bar_value(value: Any, top: float) -> float:
    """``value`` to draw as a bar on a scale up to ``top``: beyond it (+inf) as ``top``, NaN
    or no number as nothing."""
    number = _num(value)
    if math.isnan(number):
        return 0.0
    return min(number, top)


def _nice_max(value: float) -> float:
    """A round axis maximum at or above ``value``: 1, 2, 2.5 or 5 times a power of ten, at
    least 1 (``value`` itself near the largest float, where the next round one is infinite).

    Computed in floats: the integer power of ten of a value near 1e308 (this once was
    ``10 ** len(str(int(value)))``) cannot be turned back into a float (OverflowError)."""
    if not math.isfinite(value):
        return 1.0 if math.isnan(value) or value < 0 else sys.float_info.max
    if value <= 1:
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        candidate = step * 10.0 ** exponent
        if math.isinf(candidate):
            break
        if value <= candidate:
            return candidate
    return value



def axis_ticks(high: float, *, integer: bool = False, most: int = 5) -> list[tuple[float, str]]:
    """Round ticks of a value axis from 0 to at least ``high``: a step of 1, 2 or 5 times a
    power of ten (at least 1 when ``integer``: counts), at most about ``most`` steps, each
    labelled with only the decimals the step needs (20, 40, 60, not 18.750 or 37.500).

    The last tick is the axis maximum. Near the largest float, where the next round value
    is infinite, the axis stops at ``high`` itself."""
    if not math.isfinite(high) or high <= 0:
        high = 1.0 if math.isnan(high) or high <= 0 else sys.float_info.max
    if high < 1e-9:  # a denormal: ticks of nothing (log10 of it would lose its meaning)
        high = 1e-9
    step = 0.0
    exponent = math.floor(math.log10(high / most))
    for mantissa in (1.0, 2.0, 5.0, 10.0):
        step = mantissa * 10.0 ** exponent
        if high / step <= most + 1e-9:
            break
    if integer:
        step = max(step, 1.0)
    top = math.ceil(high / step - 1e-9) * step
    if not math.isfinite(top) or top < high:
        top = high
    decimals = 0 if integer or step >= 1 else max(0, -math.floor(math.log10(step) + 1e-9))
    ticks: list[tuple[float, str]] = []
    count = max(1, min(int(round(top / step)), 2 * most))
    for index in range(count + 1):
        value = min(index * step, top) if index < count else top
        if value == 0:
            text = "0"
        elif abs(value) >= 1e15:
            text = f"{value:.3g}"
        else:
            text = f"{value:,.{decimals}f}"
        ticks.append((value, text))
    return ticks


#: About how wide one character of an 11 px label is (system-ui), for sizing label columns.
_CHAR_W = 7.0
#: The widest label column of a bar chart; a longer label ends in "…" (full text as tooltip).
_MAX_LABEL_W = 360


def _label_width(labels: Sequence[str], least: int = 60) -> int:
    """The width a bar chart's label column needs for ``labels`` (at most _MAX_LABEL_W)."""
    longest = max((len(label) for label in labels), default=0)
    return min(max(least, math.ceil(longest * _CHAR_W) + 12), _MAX_LABEL_W)


def _label(label: str, x: float, y: float, width: int) -> str:
    """A right-aligned label ending at ``x``: shortened to fit ``width`` by a "…" in its
    middle (the end often tells labels apart: ``...-job-1``, ``...-job-2``), then carrying
    the full text as its tooltip."""
    fits = max(4, math.floor((width - 12) / _CHAR_W + 1e-9))
    if len(label) <= fits:
        return f'<text x="{x}" y="{y}" text-anchor="end">{_esc(label)}</text>'
    tail = (fits - 1) * 2 // 5
    short = label[:fits - 1 - tail] + "…" + (label[-tail:] if tail else "")
    return (f'<text x="{x}" y="{y}" text-anchor="end"><title>{_esc(label)}</title>'
            f'{_esc(short)}</text>')


def _legend(names: Sequence[str], colors: Sequence[str], x0: float, y0: float,
            width: float, dashed: Sequence[bool] | None = None) -> tuple[list[str], int]:
    """Legend entries (a swatch and a name) from ``x0``, wrapped into rows within ``width``;
    returns the SVG parts and the height they take."""
    parts: list[str] = []
    x, y = x0, y0
    for index, name in enumerate(names):
        entry_w = 14 + _CHAR_W * len(name) + 12
        if x > x0 and x + entry_w > width:
            x, y = x0, y + 16
        color = colors[index]
        if dashed is not None and dashed[index]:
            parts.append(f'<line x1="{x - 4}" y1="{y + 5}" x2="{x + 11}" y2="{y + 5}" '
                         f'stroke="{color}" stroke-width="2" stroke-dasharray="4 2"/>')
        else:
            parts.append(f'<rect x="{x}" y="{y}" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{x + 13}" y="{y + 9}">{_esc(name)}</text>')
        x += entry_w
    return parts, (int(y - y0) + 16 if names else 0)

def bar_chart(items: Sequence[tuple[str, float]], *, unit: str = "", title: str = "") -> str:
    """Horizontal bars, one per (label, value), largest first as given (nothing when empty:
    the table beside it, or the section, says why). The label column is as wide as the
    longest label needs (up to _MAX_LABEL_W: a longer one ends in "…", its tooltip whole)."""
    if not items:
        return ""
    bar_h, gap = 18, 4
    label_w = _label_width([label for label, _ in items])
    height = len(items) * (bar_h + gap) + 8
    # The scale comes from the finite values; a bar of an infinite one is drawn full (clamped),
    # one of NaN empty, each labelled with its value.
    top = _nice_max(max((f for _, v in items if (f := _finite(v)) is not None), default=0.0))
    plot_w = _WIDTH - label_w - 100
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" viewBox="0 0 {_WIDTH} {height}" '
             f'role="img" aria-label="{_esc(title)}">']
    if title:
        parts.append(f'<title>{_esc(title)}</title>')
    for index, (label, value) in enumerate(items):
        y = 4 + index * (bar_h + gap)
        width = min(max(0.0, _bar_value(value, top)) / top, 1.0) * plot_w
        parts.append(_label(label, label_w - 6, y + bar_h - 5, label_w))
        parts.append(f'<rect x="{label_w}" y="{y}" width="{width:.1f}" height="{bar_h}" '
                     f'fill="{_PALETTE[index % len(_PALETTE)]}"><title>{_esc(label)}: '
                     f'{_esc(_fmt(value))}{_esc(unit)}</title></rect>')
        parts.append(f'<text x="{label_w + width + 4:.1f}" y="{y + bar_h - 5}">'
                     f'{_esc(_fmt(value))}{_esc(unit)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def stacked_bars(items: Sequence[tuple[str, Sequence[float]]], keys: Sequence[str],
                 *, title: str = "") -> str:
    """One horizontal bar per label split into shares (each row's values sum to about 1)."""
    if not items:
        return ""
    bar_h, gap = 18, 4
    label_w = _label_width([label for label, _ in items])
    plot_w = _WIDTH - label_w - 20
    colors = [_PALETTE[index % len(_PALETTE)] for index in range(len(keys))]
    legend, legend_h = _legend(list(keys), colors, 4, 4, _WIDTH)
    legend_h += 6
    height = legend_h + len(items) * (bar_h + gap) + 8
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" viewBox="0 0 {_WIDTH} {height}" '
             f'role="img" aria-label="{_esc(title)}">', *legend]
    for row, (label, values) in enumerate(items):
        y = legend_h + row * (bar_h + gap)
        parts.append(_label(label, label_w - 6, y + bar_h - 5, label_w))
        values = [max(0.0, _finite(v) or 0.0) for v in values]  # NaN, infinities: no share
        total = sum(values) or 1.0
        offset = float(label_w)
        for index, value in enumerate(values):
            width = value / total * plot_w
            if width <= 0:
                continue
            parts.append(f'<rect x="{offset:.1f}" y="{y}" width="{width:.1f}" height="{bar_h}" '
                         f'fill="{colors[index]}"><title>{_esc(label)} '
                         f'{_esc(keys[index])}: {value / total:.1%}</title></rect>')
            offset += width
    parts.append("</svg>")
    return "".join(parts)


def _as_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


_TICK_STEPS = (1, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
               43200, 86400, 172800, 604800)


#: The instants a datetime can show (epoch seconds), a little inside (float rounding).
_FIRST_INSTANT = datetime(1, 1, 2, tzinfo=UTC).timestamp()
_LAST_INSTANT = datetime(9999, 12, 30, tzinfo=UTC).timestamp()


def _utc(x: float) -> datetime:
    """The UTC datetime of epoch seconds ``x``, clamped to what a datetime can hold."""
    return datetime.fromtimestamp(min(max(x, _FIRST_INSTANT), _LAST_INSTANT), UTC)


def time_ticks(x0: float, x1: float, most: int = 6,
               least: float = 0.0) -> list[tuple[float, str, str]]:
    """Up to ``most`` round times between ``x0`` and ``x1`` (epoch seconds), labelled
    ``HH:MM`` (``HH:MM:SS`` below a minute's step, with the date when the span crosses days);
    steps of at least ``least`` seconds (60: whole minutes, for per-minute values)."""
    span = max(x1 - x0, 1.0)
    step = float(next((s for s in _TICK_STEPS if span / s <= most and s >= least), 0))
    if not step:  # beyond weeks (years of a stray timestamp): whole days, at most ``most``
        step = float(math.ceil(span / most / 86400) * 86400)
    first = float(math.ceil(x0 / step) * step)
    days = _utc(x0).date() != _utc(x1).date()
    fmt = "%H:%M:%S" if step < 60 else "%H:%M"
    if days:
        fmt = "%m-%d " + fmt
    if span > 180 * 86400:
        fmt = "%Y-%m-%d"
    ticks: list[tuple[float, str, str]] = []
    x = first
    while x <= x1 + 1e-9:
        anchor = "start" if x - x0 < span * 0.04 else "end" if x1 - x < span * 0.04 else "middle"
        ticks.append((x, _utc(x).strftime(fmt), anchor))
        x += step
    if not ticks:
        ticks.append((x0, _utc(x0).strftime(fmt), "start"))
    return ticks


def _span_label(x0: float, x1: float) -> str:
    start = _utc(x0).strftime("%Y-%m-%d %H:%M:%S")
    end = _utc(x1).strftime("%Y-%m-%d %H:%M:%S")
    return f"UTC, {start} to {end}"


#: At most this many points per series are drawn with a marker (fewer: each one is seen).
_MARKERS_UP_TO = 40


def _time_points(raw: Sequence[tuple[Any, Any]]) -> list[tuple[float, float]]:
    """(epoch seconds, value) of the points with a readable time and a finite value, in time
    order (a NaN or infinite value, an unreadable time left out), sampled to _MAX_POINTS."""
    converted = []
    for moment, value in raw:
        parsed = _as_time(moment)
        number = _finite(value)
        if parsed is not None and number is not None:
            try:
                converted.append((parsed.timestamp(), number))
            except (OverflowError, ValueError, OSError):  # a naive year 1 in local time
                continue
    converted.sort()
    if len(converted) > _MAX_POINTS:  # keep the chart light: sample evenly
        stride = len(converted) / _MAX_POINTS
        converted = [converted[int(i * stride)] for i in range(_MAX_POINTS)]
    return converted


def _plot_frame(parts: list[str], *, left: int, top_pad: int, plot_w: int, plot_h: int,
                height: int, x0: float, x1: float, top: float, ticks: list[tuple[float, str]],
                unit: str, per_minute: bool) -> None:
    """The value grid and labels, the time ticks and the span line of a chart over time."""
    for value, text in ticks:
        y = top_pad + plot_h - value / top * plot_h
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" '
                     f'stroke="#eee"/>')
        parts.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">'
                     f'{_esc(text)}{_esc(unit)}</text>')
    for x, label, anchor in time_ticks(x0, x1, least=60.0 if per_minute else 0.0):
        sx = left + (x - x0) / (x1 - x0) * plot_w
        parts.append(f'<line x1="{sx:.1f}" y1="{top_pad}" x2="{sx:.1f}" '
                     f'y2="{top_pad + plot_h + 4}" stroke="#eee"/>')
        parts.append(f'<text x="{sx:.1f}" y="{height - 20}" text-anchor="{anchor}">'
                     f'{_esc(label)}</text>')
    parts.append(f'<text x="{left + plot_w}" y="{height - 4}" text-anchor="end">'
                 f'{_esc(_span_label(x0, x1))}</text>')


def _x_range(xs: Sequence[float], per_minute: bool) -> tuple[float, float]:
    """The time axis' ends: the points', widened by half a minute each side for per-minute
    values (so the first and last minute are not drawn on the frame's edges)."""
    x0, x1 = min(xs), max(xs)
    if per_minute:
        x0, x1 = x0 - 30.0, x1 + 30.0
    if x1 == x0:
        x1 = x0 + 1
    return x0, x1


def line_chart(series: Mapping[str, Sequence[tuple[Any, float | None]]], *, unit: str = "",
               title: str = "", y_max: float | None = None, per_minute: bool = False,
               dashed: Sequence[str] = (), colors: Mapping[str, int] | None = None) -> str:
    """Lines over time: ``series`` maps a name to (timestamp, value) points.

    A series of few points (up to _MARKERS_UP_TO) has a marker on each, with its time and
    value as tooltip: two minutes of a short log read as two values, not as a slope.
    ``per_minute`` values get whole-minute ticks and half a minute of room at each end; the
    series named in ``dashed`` are drawn dashed, ``colors`` picks a series' palette index."""
    points: dict[str, list[tuple[float, float]]] = {}
    for name, raw in series.items():
        converted = _time_points(raw)
        if converted:
            points[name] = converted
    if not points:
        return '<p class="empty">no data points in these logs</p>'
    names = list(points)
    palette = [_PALETTE[(colors or {}).get(name, index) % len(_PALETTE)]
               for index, name in enumerate(names)]
    legend, legend_h = _legend(names, palette, 60, 6, _WIDTH,
                               dashed=[name in dashed for name in names])
    left, right, top_pad, bottom = 60, 20, 16 + legend_h, 44
    height = 226 + top_pad
    plot_w, plot_h = _WIDTH - left - right, height - top_pad - bottom
    xs = [x for line in points.values() for x, _ in line]
    ys = [y for line in points.values() for _, y in line]
    x0, x1 = _x_range(xs, per_minute)
    integral = all(y == int(y) for y in ys)
    ticks = axis_ticks(y_max if y_max is not None else max(ys), integer=integral)
    top = ticks[-1][0]

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * plot_w

    def sy(y: float) -> float:
        return top_pad + plot_h - (max(min(y, top), 0.0) / top) * plot_h

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" viewBox="0 0 {_WIDTH} {height}" '
             f'role="img" aria-label="{_esc(title)}">', *legend]
    _plot_frame(parts, left=left, top_pad=top_pad, plot_w=plot_w, plot_h=plot_h, height=height,
                x0=x0, x1=x1, top=top, ticks=ticks, unit=unit, per_minute=per_minute)
    fmt = "%H:%M" if per_minute else "%H:%M:%S"
    for index, (name, line) in enumerate(points.items()):
        color = palette[index]
        dash = ' stroke-dasharray="5 3"' if name in dashed else ""
        if len(line) > 1:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in line)
            parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5"{dash} '
                         f'points="{path}"/>')
        if len(line) <= _MARKERS_UP_TO:
            for x, y in line:
                parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}">'
                             f'<title>{_esc(name)} at {_utc(x).strftime(fmt)}: '
                             f'{_esc(_fmt(y))}{_esc(unit)}</title></circle>')
    parts.append("</svg>")
    return "".join(parts)


def minute_columns(series: Mapping[str, Sequence[tuple[Any, Any]]], *, unit: str = "",
                   title: str = "", notes: Mapping[tuple[str, float], str] | None = None) -> str:
    """Per-minute counts as columns, one per minute, the series stacked in it (e.g. the
    errors of each broker): a count per minute reads as a count, even for two minutes.

    ``notes`` adds text to a column part's tooltip, by (series, epoch second of its minute).
    Beyond _MAX_POINTS minutes, a line per series (:func:`line_chart`) stands in."""
    points = {name: line for name, raw in series.items() if (line := _time_points(raw))}
    if not points:
        return '<p class="empty">no data points in these logs</p>'
    minutes = sorted({x for line in points.values() for x, _ in line})
    if len(minutes) >= _MAX_POINTS:
        return line_chart(series, unit=unit, title=title, per_minute=True)
    names = list(points)
    palette = [_PALETTE[index % len(_PALETTE)] for index in range(len(names))]
    legend, legend_h = _legend(names, palette, 60, 6, _WIDTH)
    left, right, top_pad, bottom = 60, 20, 16 + legend_h, 44
    height = 206 + top_pad
    plot_w, plot_h = _WIDTH - left - right, height - top_pad - bottom
    x0, x1 = _x_range(minutes, True)
    stacks: dict[float, float] = {}
    for line in points.values():
        for x, y in line:
            stacks[x] = stacks.get(x, 0.0) + max(y, 0.0)
    ticks = axis_ticks(max(stacks.values()),
                       integer=all(y == int(y) for line in points.values() for _, y in line))
    top = ticks[-1][0]
    width = max(1.0, min(60.0 / (x1 - x0) * plot_w * 0.8, 60.0))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" viewBox="0 0 {_WIDTH} {height}" '
             f'role="img" aria-label="{_esc(title)}">', *legend]
    _plot_frame(parts, left=left, top_pad=top_pad, plot_w=plot_w, plot_h=plot_h, height=height,
                x0=x0, x1=x1, top=top, ticks=ticks, unit=unit, per_minute=True)
    base: dict[float, float] = {}
    for index, (name, line) in enumerate(points.items()):
        for x, y in line:
            below = base.get(x, 0.0)
            value = max(y, 0.0)
            base[x] = below + value
            if value <= 0:
                continue
            h = min(value, top) / top * plot_h
            y_top = top_pad + plot_h - min(below + value, top) / top * plot_h
            cx = left + (x - x0) / (x1 - x0) * plot_w
            note = (notes or {}).get((name, x), "")
            parts.append(f'<rect x="{cx - width / 2:.1f}" y="{y_top:.1f}" width="{width:.1f}" '
                         f'height="{h:.1f}" fill="{palette[index]}"><title>{_esc(name)} at '
                         f'{_utc(x).strftime("%H:%M")}: {_esc(_fmt(y))}{_esc(unit)}'
                         f'{_esc(note)}</title></rect>')
    parts.append("</svg>")
    return "".join(parts)


class _Figure(str):
    """A number already written out (``59.5%``): a table shows it right-aligned, as a number."""

def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None,
          *, limit: int = _MAX_ROWS,
          empty: str = "no rows: this did not happen in these logs",
          headings: Mapping[str, str] | None = None) -> str:
    """An HTML table of the first ``limit`` rows (all columns unless named), in a box that
    scrolls sideways when the table is wider than the page; ``empty`` stands in for no rows.
    ``headings`` gives a column a heading in plain words (its column name as tooltip)."""
    if not rows:
        return f'<p class="empty">{_esc(empty)}</p>' if empty else ""
    names = list(columns) if columns is not None else list(rows[0].keys())
    words = headings or {}

    def heading(index: int, name: str) -> str:
        # Aligned as the column's values are: text to the left, numbers to the right.
        left = index == 0 or isinstance(rows[0].get(name), (str, list))
        css = ' class="l"' if left else ""
        if name in words:
            css = ' class="l w"' if left else ' class="w"'
            return f'<th{css} title="{_esc(name)}">{_esc(words[name])}</th>'
        return f"<th{css}>{_esc(name)}</th>"

    head = "".join(heading(i, n) for i, n in enumerate(names))
    body = []
    for row in rows[:limit]:
        cells = []
        for i, name in enumerate(names):
            value = row.get(name)
            if isinstance(value, str) and "\n" in value:
                css = ' class="pre"'
            elif isinstance(value, _Figure):
                css = ""
            elif i == 0 or isinstance(value, (str, list)):
                css = ' class="l"'
            else:
                css = ""
            cells.append(f"<td{css}>{_esc(_fmt(value))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    more = (f'<p class="hint">{len(rows) - limit:,} more rows in the Parquet table.</p>'
            if len(rows) > limit else "")
    return f'<div class="scroll"><table><tr>{head}</tr>{"".join(body)}</table></div>{more}'
