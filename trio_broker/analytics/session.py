"""The SparkSession ``trio_broker analyze`` runs in: local-mode settings, or a cluster's own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import SparkSession


# -- session ------------------------------------------------------------------------------------


#: Below this much input, a local JVM runs with the C1 JIT alone (see :func:`get_spark`).
SMALL_INPUT_BYTES = 512 * 1024 * 1024


def get_spark(master: str | None = None, app_name: str = "trio_broker analyze",
              extra_conf: Mapping[str, str] | None = None,
              input_bytes: int | None = 0) -> tuple[SparkSession, bool]:
    """A SparkSession and whether this call created it (so the caller knows to stop it).

    ``input_bytes`` (the size of the logs, None when unknown) picks the local JVM's JIT.

    Without ``master`` (and no ``spark.master`` from ``spark-submit``), runs locally on two cores.
    Start-up is kept light: no web UI, no console progress bar, few shuffle partitions locally.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        return active, False
    # getOrCreate hands back a running context whatever the conf says: then it is not ours
    # to stop (a test's shared session, a notebook's).
    existing = SparkContext._active_spark_context is not None
    conf = SparkConf()
    if master:
        conf.setMaster(master)
    elif not conf.contains("spark.master"):
        conf.setMaster("local[2]")
    conf.setAppName(app_name)
    conf.set("spark.ui.enabled", "false")
    conf.set("spark.ui.showConsoleProgress", "false")
    conf.set("spark.sql.session.timeZone", "UTC")
    if (conf.get("spark.master") or "").startswith("local"):
        # Broker logs analysed on one machine are small for Spark: re-planning adaptively
        # costs more than it saves. Whole-stage code stays off: on the 2,000,000-line bench
        # log it saved no CPU time (runs with and without it peaked at 1.4-2.6 GB; see
        # docs/performance.md). On small
        # inputs the JIT's optimising tier costs more than it saves: C1 alone ran the
        # 200,000-line bench log 3x faster on two busy cores (C2's compile threads compete with
        # a short job), while C2 halved the parse of the 2,000,000-line log. The serial GC
        # keeps the JVM's resident memory small.
        small = input_bytes is not None and input_bytes < SMALL_INPUT_BYTES
        java = "-XX:+UseSerialGC" + (" -XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=64m"
                                     if small else "")
        for key, value in (("spark.sql.shuffle.partitions", "2"),
                           ("spark.sql.codegen.wholeStage", "false"),
                           ("spark.sql.adaptive.enabled", "false"),
                           ("spark.driver.memory", "1g"),
                           ("spark.driver.extraJavaOptions", java)):
            if not conf.contains(key):
                conf.set(key, value)
    for key, value in (extra_conf or {}).items():
        conf.set(key, value)
    spark = SparkSession.builder.config(conf=conf).getOrCreate()
    if existing:
        return spark, False
    spark.sparkContext.setLogLevel("ERROR")
    return spark, True
