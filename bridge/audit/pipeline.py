"""The audit of one run folder: check and read its event logs, compute every figure with
Spark, write ``report.json``, the PNG plots and ``index.html``.

``spark_session`` makes the session the command line uses; tests and benchmarks pass their
own to ``audit``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bridge.audit import figures, plots
from bridge.audit.read import AuditError, check, find_files, load

LOG4J = Path(__file__).with_name("log4j2.properties")
REPORT = "report.json"
EVENTS_PER_PARTITION = 1_000_000
"""With no fixed ``shuffle_partitions``, one shuffle partition per this many events (at
least one per core): few for a small run, where each task costs more than its data, and
enough for a large one that no partition's aggregation spills to disk."""

Step = Callable[[str], None]


def spark_session(
    master: str | None = None,
    *,
    driver_memory: str = "2g",
    console_progress: bool = False,
    app_name: str = "txbridge audit",
) -> Any:
    """A Spark session for the audit: ``master`` if given; else the one ``spark-submit``
    set, or ``local[*]`` when started from Python. Spark's UI is off, its log quiet
    (warnings from Spark itself are errors-only: bridge/audit/log4j2.properties)."""
    from pyspark.sql import SparkSession  # noqa: PLC0415

    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit
        builder = builder.master("local[*]")
    options = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": str(console_progress).lower(),
        "spark.driver.memory": driver_memory,
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{LOG4J}",
        "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
    }
    for key, value in options.items():
        builder = builder.config(key, value)
    try:
        return builder.getOrCreate()
    except Exception as error:
        if "JAVA_GATEWAY_EXITED" in str(error) or "Java gateway" in str(error):
            raise AuditError(
                f"Spark could not start ({error}); is Java 17 or later installed, on PATH "
                "or as JAVA_HOME?"
            ) from None
        raise


def partitions_for(events: int, cores: int) -> int:
    """The shuffle partitions for ``events`` events on ``cores`` cores."""
    return max(cores, -(-events // EVENTS_PER_PARTITION))


def audit(
    spark: Any,
    run_dir: Path,
    out_dir: Path | None = None,
    *,
    run: str | None = None,
    step: Step | None = None,
    shuffle_partitions: int | None = None,
) -> dict[str, Any]:
    """Audit ``run_dir`` into ``out_dir`` (default ``run_dir/report``); returns the report
    written to ``report.json``. ``run`` picks one run of a folder that holds several;
    ``shuffle_partitions`` fixes spark.sql.shuffle.partitions, else it follows the events'
    count (``EVENTS_PER_PARTITION``)."""
    started = time.monotonic()
    say = step or (lambda _: None)
    out = run_dir / "report" if out_dir is None else out_dir
    say("finding the event logs")
    files = find_files(run_dir, run)
    frame = load(spark, files)
    say("checking every event")
    checked = check(frame, run_dir)
    if len(checked.runs) > 1:
        raise AuditError(f"{run_dir} holds the runs {', '.join(checked.runs)}: pick one with --run")
    spark.conf.set(
        "spark.sql.shuffle.partitions",
        str(
            shuffle_partitions
            or partitions_for(checked.events, spark.sparkContext.defaultParallelism)
        ),
    )
    computed = figures.compute(frame, checked, say)
    report: dict[str, Any] = {
        "runs": list(checked.runs),
        "processes": list(checked.processes),
        "events": checked.events,
        "per_kind": checked.per_kind,
        "skipped": {"total": sum(checked.skipped.values()), "files": checked.skipped},
        "window": {
            "start_ns": checked.start_ns,
            "end_ns": checked.end_ns,
            "seconds": (checked.end_ns - checked.start_ns) / figures.NS,
        },
        **computed,
    }
    say("plots and index.html")
    out.mkdir(parents=True, exist_ok=True)
    report["plots"] = plots.draw(report, out)
    report["audit"] = {
        "seconds": time.monotonic() - started,
        "master": spark.sparkContext.master,
        "spark": spark.version,
    }
    (out / REPORT).write_text(json.dumps(report, indent=2) + "\n")
    plots.index(report, report["plots"], out / "index.html")
    return report
