"""An ad-hoc DataFrame query over trio_broker's structured logs.

    trio_broker run --override logging.file=logs/broker.log &
    ...                                          # drive it with clients
    python examples/analyze_logs.py logs/ --top 10
    python examples/analyze_logs.py 'logs/broker.log*' --api Produce --slower-than 50

Needs the analytics extra (``pip install 'trio-broker[analytics]'``). The logs are read with the
schema declared in ``trio_broker/observability/events.py`` (``read_logs``), so every column has
its declared type and malformed lines are set aside; from there on it is plain PySpark. This
query answers "which client and API make the slow requests, and where does their time go?".
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def slow_requests_by_client(events: Any, *, api: str | None = None,
                            slower_than_ms: float = 0.0) -> Any:
    """Per (client_id, api): requests, p95 total time, and the mean of every stage."""
    from pyspark.sql import functions as F

    from trio_broker.analytics.jobs import STAGES

    requests = events.where(F.col("event") == "request")
    if api is not None:
        requests = requests.where(F.col("api") == api)
    requests = requests.where(F.col("total_ms") >= slower_than_ms)
    return (requests.groupBy("client_id", "api")
            .agg(F.count(F.lit(1)).alias("requests"),
                 F.percentile_approx("total_ms", 0.95).alias("p95_total_ms"),
                 *(F.round(F.avg(stage), 3).alias(f"avg_{stage}") for stage in STAGES))
            .orderBy(F.desc("requests"), "client_id", "api"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", metavar="PATH", help="log files, globs or dirs")
    parser.add_argument("--api", help="only this API (e.g. Produce)")
    parser.add_argument("--slower-than", type=float, default=0.0, metavar="MS",
                        help="only requests whose total_ms is at least this")
    parser.add_argument("--top", type=int, default=20, help="rows to show")
    parser.add_argument("--master", help="Spark master URL (default local[2])")
    args = parser.parse_args(argv)

    from trio_broker.analytics.inputs import expand_paths
    from trio_broker.analytics.jobs import get_spark, read_logs, valid_events

    spark, created = get_spark(args.master, app_name="analyze_logs example")
    try:
        lines = read_logs(spark, expand_paths(args.paths)).cache()
        events = valid_events(lines)
        result = slow_requests_by_client(events, api=args.api, slower_than_ms=args.slower_than)
        result.show(args.top, truncate=False)
        from pyspark.sql import functions as F

        unusable = lines.where(F.col("problem").isNotNull() & (F.col("problem") != "blank"))
        print(f"{unusable.count()} unusable line(s) skipped")
    finally:
        if created:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
