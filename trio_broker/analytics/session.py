"""The SparkSession ``trio_broker analyze`` runs in: local-mode settings, or a cluster's own."""

from __future__ import annotations

import os
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

    The master is ``master``, else the one ``spark-submit`` set (``--master`` or its default),
    else the ``SPARK_MASTER`` environment variable, else ``local[2]``.
    ``input_bytes`` (the size of the logs, None when unknown) picks the local JVM's JIT.
    Start-up is kept light: no web UI, no console progress bar; the local-mode tuning applies
    to ``local`` masters only.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        return active, False
    # getOrCreate hands back a running context whatever the conf says: then it is not ours
    # to stop (a test's shared session, a notebook's).
    existing = SparkContext._active_spark_context is not None
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        # spark-submit's Python driver: spark-submit's JVM already runs, with its settings
        # (spark.master among them) as system properties, which SparkConf() loads only once
        # the gateway to that JVM is open. Otherwise the JVM is left to start with the conf
        # below (the driver's memory and JVM options can only be set at its launch).
        SparkContext._ensure_initialized()
    conf = SparkConf()
    if master:
        conf.setMaster(master)
    elif not conf.contains("spark.master"):
        conf.setMaster(os.environ.get("SPARK_MASTER") or "local[2]")
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
        # keeps the JVM's resident memory small, and a heap of 896 MiB keeps the whole
        # process tree under 1.5 GiB at any input size (the lines live in the Parquet copy,
        # not in the heap): 1,423 MiB at 2,000,000 lines, and no more CPU than with 1 GiB.
        small = input_bytes is not None and input_bytes < SMALL_INPUT_BYTES
        java = "-XX:+UseSerialGC" + (" -XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=64m"
                                     if small else "")
        for key, value in (("spark.sql.shuffle.partitions", "2"),
                           ("spark.sql.codegen.wholeStage", "false"),
                           ("spark.sql.adaptive.enabled", "false"),
                           ("spark.driver.memory", "896m"),
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
