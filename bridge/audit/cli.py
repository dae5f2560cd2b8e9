"""``txbridge audit RUN_DIR [--master URL] [--out REPORT_DIR]``: the audit from the command
line, with progress while Spark works and the headline figures at the end."""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bridge.audit.read import AuditError, find_files


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run folder")
    parser.add_argument(
        "--master",
        help="Spark master: local[*] (the default from Python), local[2], spark://HOST:7077",
    )
    parser.add_argument(
        "--out", type=Path, metavar="REPORT_DIR", help="where the report goes (RUN_DIR/report)"
    )
    parser.add_argument("--run", help="the run to audit, when the folder holds several")
    parser.add_argument(
        "--shuffle-partitions",
        type=int,
        help="spark.sql.shuffle.partitions (default: one per million events, at least one "
        "per core)",
    )
    parser.add_argument("--driver-memory", default="2g", help="spark.driver.memory (2g)")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "audit",
        help="audit a run folder's event logs with Spark",
        description="Audit a run folder's event logs with Spark (docs/audit.md).",
        epilog="example:\n  txbridge audit var/bench/node-20260101-120000 --master 'local[2]'",
    )
    add_arguments(parser)
    parser.set_defaults(handler=run)


class _Progress:
    """A spinner naming the audit's current step and, polled from Spark's status tracker
    twice a second, the tasks of its running stages."""

    def __init__(self, bar: Any) -> None:
        self.bar = bar
        self.task = bar.add_task("starting Spark", total=None)
        self.current = "starting Spark"
        self.stopped = threading.Event()
        self.watcher: threading.Thread | None = None

    def step(self, name: str) -> None:
        self.current = name
        self.bar.update(self.task, description=f"audit: {name}")

    def watch(self, spark: Any) -> None:
        tracker = spark.sparkContext.statusTracker()

        def poll() -> None:
            while not self.stopped.wait(0.5):
                stages = filter(None, map(tracker.getStageInfo, tracker.getActiveStageIds()))
                tasks = ", ".join(
                    f"stage {s.stageId}: {s.numCompletedTasks}/{s.numTasks} tasks" for s in stages
                )
                suffix = f" ({tasks})" if tasks else ""
                self.bar.update(self.task, description=f"audit: {self.current}{suffix}")

        self.watcher = threading.Thread(target=poll, name="audit-progress", daemon=True)
        self.watcher.start()

    def stop(self) -> None:
        self.stopped.set()
        if self.watcher is not None:
            self.watcher.join()


@contextmanager
def progress() -> Iterator[_Progress]:
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn  # noqa: PLC0415

    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), transient=True
    ) as bar:
        shown = _Progress(bar)
        try:
            yield shown
        finally:
            shown.stop()


def print_headline(report: dict[str, Any], out_dir: Path) -> None:
    from bridge.audit.plots import headline_rows  # noqa: PLC0415

    width = max(len(label) for label, _ in headline_rows(report))
    for label, value in headline_rows(report):
        print(f"{label:<{width}}  {value}")
    for name, count in report["skipped"]["files"].items():
        print(f"skipped {count:,} unreadable lines of {name}")
    print(f"report: {(out_dir / 'index.html').resolve()}")


def audit_folder(
    run_dir: Path,
    out_dir: Path | None,
    *,
    master: str | None = None,
    run: str | None = None,
    shuffle_partitions: int | None = None,
    driver_memory: str = "2g",
) -> tuple[dict[str, Any], Path]:
    """Start Spark, audit ``run_dir`` with progress, stop Spark: the report and its folder."""
    from bridge.audit.pipeline import audit, spark_session  # noqa: PLC0415

    find_files(run_dir, run)  # a folder that is not a run fails before Spark starts
    out = run_dir / "report" if out_dir is None else out_dir
    with progress() as shown:
        spark = spark_session(
            master,
            driver_memory=driver_memory,
            console_progress=False,
        )
        try:
            shown.watch(spark)
            report = audit(
                spark,
                run_dir,
                out,
                run=run,
                step=shown.step,
                shuffle_partitions=shuffle_partitions,
            )
        finally:
            shown.stop()
            spark.stop()
    return report, out


def run(args: argparse.Namespace) -> int:
    try:
        report, out = audit_folder(
            args.run_dir,
            args.out,
            master=args.master,
            run=args.run,
            shuffle_partitions=args.shuffle_partitions,
            driver_memory=args.driver_memory,
        )
    except AuditError as error:
        print(f"txbridge audit: {error}", file=sys.stderr)
        return 1
    print_headline(report, out)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="txbridge audit", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))
