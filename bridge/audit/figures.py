"""The audit's figures, computed with Spark DataFrames: delivery (queue-checker semantics),
latency, throughput, flow-control pauses and RSS.

Every event stays in Spark. The messages table (one row per producer and sequence, built by
one aggregation over the events) is cached and the figures are aggregations of it; only
their small results (per producer, per node, per second, examples) come to the driver.

Delivery, for each message a producer attempted (``send-invoked``) or a consumer received:

- **confirmed**: the node confirmed the send; **failed**: refused and not confirmed;
  **unknown**: neither confirmed nor failed (``send-unknown``, or no outcome logged);
- **lost**: confirmed and never received; **unexpected**: received, never attempted
  (receipts naming no producer or sequence count here too);
- **duplicated**: received more than once; **recovered**: received though its send failed
  or its outcome was unknown;
- **order violations**: a message whose first receipt by a process came after that
  process's first receipt of a later message of the same producer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bridge import events
from bridge.audit.read import CORRUPT, AuditError, Checked

PERCENTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999))
ACCURACY = 100_000
"""percentile_approx's accuracy: the rank error is at most 1/ACCURACY of the count, so
percentiles of up to that many latencies are exact."""
EXAMPLES = 10
LONGEST_PAUSES = 100
HISTOGRAM_STEPS_PER_DECADE = 20
NS = 1_000_000_000

Step = Callable[[str], None]


def _functions() -> Any:
    from pyspark.sql import functions as F  # noqa: PLC0415

    return F


def _second(column: Any, start_ns: int) -> Any:
    """The whole second of the run a nanosecond timestamp falls in."""
    F = _functions()
    return F.floor((column - F.lit(start_ns)) / F.lit(NS)).cast("long")


def _packed(ts: Any, start_ns: int, name: Any, names: tuple[str, ...]) -> Any:
    """``(ts - start) * (len(names) + 1) + position of name`` (0 for none) as one long, so
    that the first event and its name come from a plain ``min``: a hash aggregation of
    longs, where a ``min`` of a struct holding a string is a sort aggregation that sorts
    every event (twice, and spilling, at 10 million messages)."""
    F = _functions()
    position = F.coalesce(F.array_position(F.array(*map(F.lit, names)), name), F.lit(0))
    return (ts - F.lit(start_ns)) * F.lit(len(names) + 1) + position


def _unpacked(packed: str, start_ns: int, names: tuple[str, ...]) -> tuple[Any, Any]:
    """The timestamp and the name (null for none) of a ``_packed`` column."""
    F = _functions()
    base = F.lit(len(names) + 1)
    position = (F.col(packed) % base).cast("int")
    name = F.when(position > 0, F.element_at(F.array(*map(F.lit, names)), position))
    ts = F.floor(F.col(packed) / base).cast("long") + F.lit(start_ns)
    return ts, name


def packable(values: tuple[str, ...], checked: Checked) -> tuple[str, ...]:
    """``values``, checked to pack with every timestamp of the run into a long."""
    span = checked.end_ns - checked.start_ns
    if (span + 1) * (len(values) + 1) >= 2**63:
        raise AuditError(
            f"the run spans {span / NS:,.0f} s with {len(values)} processes and nodes: too "
            "long to audit in one piece; audit its runs or a shorter window separately"
        )
    return values


def messages(frame: Any, checked: Checked) -> Any:
    """One row per (producer, seq): attempts, first send, first confirmation (with the node
    that confirmed), failed/unknown flags, deliveries and the first receipt (with the
    process that received it)."""
    F = _functions()
    kind = F.col("kind")
    start = checked.start_ns
    nodes = packable(checked.nodes, checked)
    processes = packable(checked.processes, checked)

    def count(name: str) -> Any:
        return F.sum((kind == name).cast("long"))

    def first(name: str, packed: Any) -> Any:
        return F.min(F.when(kind == name, packed))

    identified = frame.where(
        F.col(CORRUPT).isNull()
        & kind.isin(
            events.SEND_INVOKED,
            events.SEND_CONFIRMED,
            events.SEND_FAILED,
            events.SEND_UNKNOWN,
            events.RECEIVED,
        )
        & F.col("producer").isNotNull()
        & F.col("seq").isNotNull()
    )
    grouped = identified.groupBy("producer", "seq").agg(
        count(events.SEND_INVOKED).alias("attempts"),
        first(events.SEND_INVOKED, F.col("ts")).alias("sent_ts"),
        first(events.SEND_CONFIRMED, _packed(F.col("ts"), start, F.col("node"), nodes)).alias(
            "confirm"
        ),
        (count(events.SEND_FAILED) > 0).alias("failed"),
        count(events.RECEIVED).alias("deliveries"),
        first(events.RECEIVED, _packed(F.col("ts"), start, F.col("process"), processes)).alias(
            "rx"
        ),
    )
    confirm_ts, confirm_node = _unpacked("confirm", start, nodes)
    rx_ts, rx_process = _unpacked("rx", start, processes)
    return grouped.select(
        "producer",
        "seq",
        "attempts",
        "sent_ts",
        confirm_ts.alias("confirm_ts"),
        confirm_node.alias("confirm_node"),
        "failed",
        "deliveries",
        rx_ts.alias("rx_ts"),
        rx_process.alias("rx_process"),
    )


def _classes() -> dict[str, Any]:
    """Each delivery figure as a 0/1 column of the messages table."""
    F = _functions()
    attempted = F.col("attempts") > 0
    confirmed = F.col("confirm_ts").isNotNull()
    received = F.col("deliveries") > 0
    failed = attempted & ~confirmed & F.col("failed")
    unknown = attempted & ~confirmed & ~F.col("failed")
    return {
        "attempted": attempted,
        "confirmed": confirmed,
        "failed": failed,
        "unknown": unknown,
        "received": received,
        "lost": confirmed & ~received,
        "unexpected": ~attempted & received,
        "duplicated": F.col("deliveries") > 1,
        "recovered": attempted & ~confirmed & received,
        "recovered_failed": failed & received,
        "recovered_unknown": unknown & received,
    }


def delivery(table: Any, checked: Checked) -> dict[str, Any]:
    """The delivery figures overall, per producer and per node, with examples."""
    F = _functions()
    classes = _classes()
    sums = [F.sum(column.cast("long")).alias(name) for name, column in classes.items()]
    per_producer_rows = (
        table.groupBy("producer")
        .agg(
            *sums,
            F.sum(F.greatest(F.col("deliveries") - 1, F.lit(0))).alias("duplicate_deliveries"),
            F.sum("deliveries").alias("deliveries"),
        )
        .collect()
    )
    violations = order_violations(table)
    names = [*classes, "duplicate_deliveries", "deliveries"]
    per_producer = {
        row["producer"]: {
            **{name: int(row[name]) for name in names},
            "order_violations": violations.get(row["producer"], 0),
        }
        for row in sorted(per_producer_rows, key=lambda row: row["producer"])
    }
    totals = {
        name: sum(producer[name] for producer in per_producer.values())
        for name in [*names, "order_violations"]
    }
    unidentified = checked.unidentified.get(events.RECEIVED, 0)
    totals["unexpected"] += unidentified
    totals["received"] += unidentified
    totals["deliveries"] += unidentified
    per_node_rows = (
        table.where(classes["confirmed"])
        .groupBy("confirm_node")
        .agg(
            F.count(F.lit(1)).alias("confirmed"),
            F.sum(classes["lost"].cast("long")).alias("lost"),
        )
        .collect()
    )
    per_node = {
        row["confirm_node"] or "(unknown)": {"confirmed": row["confirmed"], "lost": row["lost"]}
        for row in sorted(per_node_rows, key=lambda row: row["confirm_node"] or "")
    }
    examples = {
        name: [
            {"producer": row["producer"], "seq": row["seq"]}
            for row in table.where(classes[name])
            .select("producer", "seq")
            .orderBy("producer", "seq")
            .limit(EXAMPLES)
            .collect()
        ]
        for name in ("lost", "unexpected", "duplicated", "recovered")
    }
    return {
        **totals,
        "unidentified_receipts": unidentified,
        "unidentified": checked.unidentified,
        "per_producer": per_producer,
        "per_node": per_node,
        "examples": examples,
    }


def order_violations(table: Any) -> dict[str, int]:
    """Per producer: first receipts that came after a later message's, per receiving
    process (a running maximum of the sequence over each process's receipts in time)."""
    F = _functions()
    from pyspark.sql import Window  # noqa: PLC0415

    earlier = (
        Window.partitionBy("rx_process", "producer")
        .orderBy("rx_ts", "seq")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    rows = (
        table.where(F.col("rx_ts").isNotNull())
        .select("producer", "seq", F.max("seq").over(earlier).alias("highest_before"))
        .where(F.col("seq") < F.col("highest_before"))
        .groupBy("producer")
        .count()
        .collect()
    )
    return {row["producer"]: int(row["count"]) for row in rows}


def _latency_aggregates(column: str) -> list[Any]:
    F = _functions()
    return [
        F.percentile_approx(column, [p for _, p in PERCENTILES], ACCURACY).alias("percentiles"),
        F.max(column).alias("max"),
        F.avg(column).alias("mean"),
        F.count(F.lit(1)).alias("count"),
    ]


def _latency_row(row: Any) -> dict[str, Any]:
    """Milliseconds, from a row of ``_latency_aggregates`` (nanoseconds)."""
    if not row["count"]:
        return {"count": 0, **{name: None for name, _ in PERCENTILES}, "max": None, "mean": None}
    values = dict(zip((name for name, _ in PERCENTILES), row["percentiles"], strict=True))
    return {
        "count": int(row["count"]),
        **{name: value / 1e6 for name, value in values.items()},
        "max": row["max"] / 1e6,
        "mean": row["mean"] / 1e6,
    }


def latency(table: Any, start_ns: int) -> dict[str, Any]:
    """End-to-end latency (first receipt - first send) percentiles, overall and per second
    of receipt, in milliseconds; a log-scale histogram; negative ones (clock skew)."""
    F = _functions()
    # Few tasks: each task keeps a percentile sketch per second it sees, and the messages
    # table's partitions each hold messages of every second, so with one task per shuffle
    # partition the sketches (and their merging) grew with partitions x seconds, both in
    # proportion to the run (50 million messages: 150 x 500).
    latencies = (
        table.where(F.col("sent_ts").isNotNull() & F.col("rx_ts").isNotNull())
        .select(
            (F.col("rx_ts") - F.col("sent_ts")).alias("latency"),
            _second(F.col("rx_ts"), start_ns).alias("second"),
        )
        .coalesce(table.sparkSession.sparkContext.defaultParallelism)
    )
    overall_row = latencies.agg(
        *_latency_aggregates("latency"),
        F.sum((F.col("latency") < 0).cast("long")).alias("negative"),
    ).first()
    per_second = [
        {"second": row["second"], **_latency_row(row)}
        for row in latencies.groupBy("second")
        .agg(*_latency_aggregates("latency"))
        .orderBy("second")
        .collect()
    ]
    step = F.floor(
        F.log10(F.greatest(F.col("latency"), F.lit(1)).cast("double")) * HISTOGRAM_STEPS_PER_DECADE
    ).cast("long")
    histogram = [
        {
            "from_ms": 10 ** (row["step"] / HISTOGRAM_STEPS_PER_DECADE) / 1e6,
            "to_ms": 10 ** ((row["step"] + 1) / HISTOGRAM_STEPS_PER_DECADE) / 1e6,
            "count": row["count"],
        }
        for row in latencies.groupBy(step.alias("step")).count().orderBy("step").collect()
    ]
    return {
        "overall": _latency_row(overall_row),
        "negative": int(overall_row["negative"] or 0),
        "per_second": per_second,
        "histogram": histogram,
    }


def throughput(table: Any, start_ns: int) -> dict[str, Any]:
    """Messages sent (first send), confirmed and received (first receipt) per second, and
    the rates over the run: messages / (last - first) of each."""
    F = _functions()
    stamps = {"sent": "sent_ts", "confirmed": "confirm_ts", "received": "rx_ts"}
    per_kind = table.select(
        F.explode(
            F.array(
                *(
                    F.struct(F.lit(name).alias("what"), F.col(c).alias("ts"))
                    for name, c in stamps.items()
                )
            )
        ).alias("e")
    ).where(F.col("e.ts").isNotNull())
    rows = (
        per_kind.groupBy(
            F.col("e.what").alias("what"), _second(F.col("e.ts"), start_ns).alias("second")
        )
        .count()
        .collect()
    )
    spans = per_kind.groupBy(F.col("e.what").alias("what")).agg(
        F.min("e.ts").alias("first"), F.max("e.ts").alias("last"), F.count(F.lit(1)).alias("n")
    )
    seconds: dict[int, dict[str, int]] = {}
    for row in rows:
        seconds.setdefault(row["second"], dict.fromkeys(stamps, 0))[row["what"]] = row["count"]
    rates = {}
    for row in spans.collect():
        elapsed = (row["last"] - row["first"]) / NS
        rates[f"{row['what']}_per_s"] = row["n"] / elapsed if elapsed > 0 else None
    empty = dict.fromkeys(stamps, 0)
    span = range(min(seconds), max(seconds) + 1) if seconds else range(0)
    return {
        **{f"{name}_per_s": rates.get(f"{name}_per_s") for name in stamps},
        "per_second": [{"second": s, **seconds.get(s, empty)} for s in span],
    }


def pauses(frame: Any, start_ns: int, end_ns: int) -> dict[str, Any]:
    """Flow-control pause spans (``flow-paused`` to the process's next flow event, or to
    the end of the run when none follows: counted as unclosed); totals per process, the
    longest spans, and the paused seconds within each second of the run per process."""
    F = _functions()
    from pyspark.sql import Window  # noqa: PLC0415

    flow = frame.where(
        F.col(CORRUPT).isNull() & F.col("kind").isin(events.FLOW_PAUSED, events.FLOW_RESUMED)
    )
    following = Window.partitionBy("process").orderBy("ts")
    spans = (
        flow.select(
            "process",
            "kind",
            "ts",
            "address",
            "detail",
            F.lead("kind").over(following).alias("next_kind"),
            F.lead("ts").over(following).alias("next_ts"),
        )
        .where(F.col("kind") == events.FLOW_PAUSED)
        .select(
            "process",
            "address",
            "detail",
            F.col("ts").alias("start"),
            F.coalesce("next_ts", F.lit(end_ns)).alias("end"),
            F.coalesce(F.col("next_kind") != events.FLOW_RESUMED, F.lit(True)).alias("unclosed"),
        )
        .withColumn("length", F.col("end") - F.col("start"))
    ).cache()
    try:
        per_process = {
            row["process"]: {
                "count": row["count"],
                "total_s": (row["total"] or 0) / NS,
                "max_s": (row["max"] or 0) / NS,
                "unclosed": row["unclosed"],
            }
            for row in spans.groupBy("process")
            .agg(
                F.count(F.lit(1)).alias("count"),
                F.sum("length").alias("total"),
                F.max("length").alias("max"),
                F.sum(F.col("unclosed").cast("long")).alias("unclosed"),
            )
            .orderBy("process")
            .collect()
        }
        longest = [
            {
                "process": row["process"],
                "start_s": (row["start"] - start_ns) / NS,
                "length_s": row["length"] / NS,
                "address": row["address"],
                "why": row["detail"],
                "unclosed": row["unclosed"],
            }
            for row in spans.orderBy(F.col("length").desc()).limit(LONGEST_PAUSES).collect()
        ]
        first = _second(F.col("start"), start_ns)
        last = _second(F.greatest(F.col("end") - 1, F.col("start")), start_ns)
        bucket = F.col("second") * NS + start_ns
        overlap = F.least(F.col("end"), bucket + NS) - F.greatest(F.col("start"), bucket)
        per_second = (
            spans.select(
                "process", "start", "end", F.explode(F.sequence(first, last)).alias("second")
            )
            .groupBy("process", "second")
            .agg(F.sum(overlap).alias("paused"))
            .orderBy("process", "second")
            .collect()
        )
    finally:
        spans.unpersist()
    series: dict[str, list[list[float]]] = {}
    for row in per_second:
        series.setdefault(row["process"], []).append([row["second"], row["paused"] / NS])
    return {
        "count": sum(p["count"] for p in per_process.values()),
        "total_s": sum(p["total_s"] for p in per_process.values()),
        "max_s": max((p["max_s"] for p in per_process.values()), default=0.0),
        "unclosed": sum(p["unclosed"] for p in per_process.values()),
        "per_process": per_process,
        "longest": longest,
        "paused_per_second": series,
    }


def rss(frame: Any, start_ns: int) -> dict[str, Any]:
    """RSS samples per process: peak, first, last and the peak within each second."""
    F = _functions()
    samples = frame.where(
        F.col(CORRUPT).isNull() & (F.col("kind") == events.RSS_SAMPLE) & F.col("size").isNotNull()
    ).select("process", "ts", "size", _second(F.col("ts"), start_ns).alias("second"))
    summary = (
        samples.groupBy("process")
        .agg(
            F.count(F.lit(1)).alias("samples"),
            F.max("size").alias("peak"),
            F.min_by("size", "ts").alias("first"),
            F.max_by("size", "ts").alias("last"),
        )
        .collect()
    )
    series: dict[str, list[list[int]]] = {}
    for row in (
        samples.groupBy("process", "second")
        .agg(F.max("size").alias("size"))
        .orderBy("process", "second")
        .collect()
    ):
        series.setdefault(row["process"], []).append([row["second"], row["size"]])
    return {
        "per_process": {
            row["process"]: {
                "samples": row["samples"],
                "peak_bytes": row["peak"],
                "first_bytes": row["first"],
                "last_bytes": row["last"],
                "per_second": series.get(row["process"], []),
            }
            for row in sorted(summary, key=lambda row: row["process"])
        }
    }


def faults(frame: Any, start_ns: int, limit: int = 1000) -> list[dict[str, Any]]:
    """The injected faults in time order (the first ``limit``)."""
    F = _functions()
    return [
        {
            "second": (row["ts"] - start_ns) / NS,
            "process": row["process"],
            "node": row["node"],
            "what": row["detail"],
        }
        for row in frame.where(F.col(CORRUPT).isNull() & (F.col("kind") == events.FAULT_INJECTED))
        .select("ts", "process", "node", "detail")
        .orderBy("ts")
        .limit(limit)
        .collect()
    ]


def compute(frame: Any, checked: Checked, step: Step) -> dict[str, Any]:
    """Every figure of the report but the plots' names and the timing."""
    from pyspark import StorageLevel  # noqa: PLC0415

    start, end = checked.start_ns, checked.end_ns
    step("messages table")
    table = messages(frame, checked).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        step("delivery")
        delivered = delivery(table, checked)
        step("latency")
        latencies = latency(table, start)
        step("throughput")
        rates = throughput(table, start)
    finally:
        table.unpersist()
    step("pauses, RSS, faults")
    return {
        "delivery": delivered,
        "latency": latencies,
        "throughput": rates,
        "pauses": pauses(frame, start, end),
        "rss": rss(frame, start),
        "faults": faults(frame, start),
    }
