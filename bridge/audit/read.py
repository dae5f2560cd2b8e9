"""Reading a run folder's event logs into one Spark DataFrame, and checking them.

Nothing is guessed: a missing folder, a stray or unreadable file, a Parquet file of another
schema, an event lacking a required field or of an unknown kind is an ``AuditError`` that
names the file. A JSON line that does not parse (a line cut short by a killed writer, a
value of the wrong type) is skipped, counted per file and reported, so a partial log still
gives an audit that says what it could not read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import attrs

from bridge import events

SUFFIXES = (".parquet", ".jsonl")
CORRUPT = "_corrupt"


class AuditError(Exception):
    """The run folder or its logs cannot be audited; the message says which file and why."""


@attrs.frozen
class RunFiles:
    """The part files of a run folder, by format."""

    events_dir: Path
    parquet: tuple[Path, ...]
    jsonl: tuple[Path, ...]


@attrs.frozen
class Checked:
    """What the check of every event found: totals, per kind, skips, the run's time span."""

    runs: tuple[str, ...]
    processes: tuple[str, ...]
    nodes: tuple[str, ...]
    """The nodes named by any event."""
    events: int
    per_kind: dict[str, int]
    skipped: dict[str, int]
    """JSON lines that did not parse, per file (relative to the run folder)."""
    unidentified: dict[str, int]
    """Message events (sends, receipts, acks) with no producer or sequence, per kind."""
    start_ns: int
    end_ns: int


def find_files(run_dir: Path, run: str | None = None) -> RunFiles:
    """The part files under ``run_dir/events`` (of ``run`` only, if given); an error for
    anything that does not fit."""
    events_dir = run_dir / events.EVENTS_DIR
    if not run_dir.is_dir():
        raise AuditError(f"{run_dir}: no such run folder")
    if not events_dir.is_dir():
        raise AuditError(
            f"{events_dir}: no such folder; a run folder holds its event logs in "
            "events/run=RUN/process=PROCESS/part-*.parquet|jsonl (docs/events.md)"
        )
    found: dict[str, list[Path]] = {suffix: [] for suffix in SUFFIXES}
    for path in sorted(events_dir.rglob("*")):
        if path.is_dir() or path.name.startswith((".", "_")):
            continue
        relative = path.relative_to(events_dir).parts
        in_layout = (
            len(relative) == 3
            and relative[0].startswith("run=")
            and relative[1].startswith("process=")
        )
        if not in_layout or path.suffix not in SUFFIXES:
            raise AuditError(
                f"{path}: not an event log part (expected "
                "events/run=RUN/process=PROCESS/part-*.parquet|jsonl)"
            )
        if run is None or relative[0] == f"run={run}":
            found[path.suffix].append(path)
    if not any(found.values()):
        which = "" if run is None else f" of run {run!r}"
        raise AuditError(f"{events_dir}: no event log files{which}")
    parquet = tuple(found[".parquet"])
    for path in parquet:
        _check_parquet(path)
    return RunFiles(events_dir, parquet, tuple(found[".jsonl"]))


def _check_parquet(path: Path) -> None:
    """Read the footer: a cut-short or foreign file, or another schema, is named here."""
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.parquet as pq  # noqa: PLC0415

    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as error:
        raise AuditError(f"{path}: not a readable Parquet file (cut short?): {error}") from None
    expected = events.arrow_schema()
    problems = []
    for field in expected:
        index = schema.get_field_index(field.name)
        if index < 0:
            problems.append(f"no field {field.name!r}")
        elif schema.field(index).type != field.type:
            problems.append(
                f"field {field.name!r} is {schema.field(index).type}, expected {field.type}"
            )
    if problems:
        raise AuditError(f"{path}: wrong schema: " + "; ".join(problems) + " (docs/events.md)")


def spark_schema(*, corrupt: bool) -> Any:
    """The part files' fields as a Spark schema (with the corrupt-line column for JSON)."""
    from pyspark.sql import types as T  # noqa: PLC0415

    kinds = {"string": T.StringType(), "long": T.LongType()}
    fields = [T.StructField(name, kinds[kind], True) for name, kind in events.FIELDS]
    if corrupt:
        fields.append(T.StructField(CORRUPT, T.StringType(), True))
    return T.StructType(fields)


def load(spark: Any, files: RunFiles) -> Any:
    """Every event as one DataFrame: the schema's fields, ``run``, ``process``, ``file``
    and ``_corrupt`` (the raw text of a JSON line that did not parse, else null)."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    base = str(files.events_dir)
    frames = []
    columns = [name for name, _ in events.FIELDS]
    if files.parquet:
        frame = (
            spark.read.option("basePath", base)
            .schema(spark_schema(corrupt=False))
            .parquet(*map(str, files.parquet))
            .withColumn(CORRUPT, F.lit(None).cast("string"))
        )
        frames.append(frame)
    if files.jsonl:
        frame = (
            spark.read.option("basePath", base)
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", CORRUPT)
            .schema(spark_schema(corrupt=True))
            .json(list(map(str, files.jsonl)))
        )
        frames.append(frame)
    selected = [
        frame.select(*columns, "run", "process", CORRUPT, F.input_file_name().alias("file"))
        for frame in frames
    ]
    result = selected[0]
    for frame in selected[1:]:
        result = result.unionByName(frame)
    return result


MESSAGE_KINDS = (
    events.SEND_INVOKED,
    events.SEND_CONFIRMED,
    events.SEND_FAILED,
    events.SEND_UNKNOWN,
    events.RECEIVED,
    events.ACKED,
)


def check(frame: Any, run_dir: Path) -> Checked:
    """One pass over every event: per-file problems (an error naming the files) and skips,
    per-kind counts, the processes and nodes, the run's time span. Returns only these
    aggregates."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    corrupt = F.col(CORRUPT).isNotNull()
    lacking = ~corrupt & (F.col("kind").isNull() | F.col("ts").isNull())
    unknown = ~corrupt & F.col("kind").isNotNull() & ~F.col("kind").isin(*events.KINDS)
    unidentified = (
        ~corrupt
        & F.col("kind").isin(*MESSAGE_KINDS)
        & (F.col("producer").isNull() | F.col("seq").isNull())
    )
    per_file_kind = (
        frame.groupBy("file", "run", "process", "kind", "node")
        .agg(
            F.count(F.lit(1)).alias("events"),
            F.sum(corrupt.cast("long")).alias("corrupt"),
            F.sum(lacking.cast("long")).alias("lacking"),
            F.sum(unknown.cast("long")).alias("unknown"),
            F.sum(unidentified.cast("long")).alias("unidentified"),
            F.min(F.when(~corrupt, F.col("ts"))).alias("start"),
            F.max(F.when(~corrupt, F.col("ts"))).alias("end"),
        )
        .collect()
    )
    skipped: dict[str, int] = {}
    per_kind: dict[str, int] = {}
    no_id: dict[str, int] = {}
    runs: set[str] = set()
    processes: set[str] = set()
    nodes: set[str] = set()
    starts: list[int] = []
    ends: list[int] = []
    lacking_per_file: dict[str, int] = {}
    unknown_per_file: dict[tuple[str, str], int] = {}
    for row in per_file_kind:
        name = _relative(row["file"], run_dir)
        if row["lacking"]:
            lacking_per_file[name] = lacking_per_file.get(name, 0) + row["lacking"]
        if row["unknown"]:
            key = (name, row["kind"])
            unknown_per_file[key] = unknown_per_file.get(key, 0) + row["unknown"]
        if row["corrupt"]:
            skipped[name] = skipped.get(name, 0) + row["corrupt"]
        good = row["events"] - row["corrupt"]
        if good and row["kind"] is not None:
            per_kind[row["kind"]] = per_kind.get(row["kind"], 0) + good
            runs.add(row["run"])
            processes.add(row["process"])
            if row["node"] is not None:
                nodes.add(row["node"])
        if row["unidentified"]:
            no_id[row["kind"]] = no_id.get(row["kind"], 0) + row["unidentified"]
        if row["start"] is not None:
            starts.append(row["start"])
            ends.append(row["end"])
    problems = [
        *(
            f"{name}: {n} events lack a required field (kind, ts)"
            for name, n in lacking_per_file.items()
        ),
        *(
            f"{name}: {n} events of unknown kind {kind!r}"
            for (name, kind), n in unknown_per_file.items()
        ),
    ]
    if problems:
        raise AuditError("bad event logs:\n  " + "\n  ".join(sorted(set(problems))))
    if not starts:
        raise AuditError(f"{run_dir}: the event logs hold no readable events")
    return Checked(
        runs=tuple(sorted(runs)),
        processes=tuple(sorted(processes)),
        nodes=tuple(sorted(nodes)),
        events=sum(per_kind.values()),
        per_kind=dict(sorted(per_kind.items())),
        skipped=dict(sorted(skipped.items())),
        unidentified=dict(sorted(no_id.items())),
        start_ns=min(starts),
        end_ns=max(ends),
    )


def _relative(file: str, run_dir: Path) -> str:
    """A file named by Spark (a ``file:`` URI) as a path relative to the run folder."""
    path = Path(unquote(urlparse(file).path)) if file.startswith("file:") else Path(file)
    try:
        return str(path.relative_to(run_dir.resolve()))
    except ValueError:
        return str(path)
