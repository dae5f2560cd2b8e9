"""The audit on a real Spark standalone cluster (docs/audit.md: ``--master spark://HOST:7077``):
a master and two workers started from the installed PySpark as processes on 127.0.0.1,
the audit run against them from the command line, and its report compared with the
``local[2]`` report of the same logs."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge import events
from bridge.audit.pipeline import audit
from tests.audit.conftest import require_spark
from tests.audit.logs import MS, RunLog

ROOT = Path(__file__).resolve().parent.parent.parent
STARTUP_TIMEOUT = 60.0
"""Seconds a master or worker JVM may take to come up on a loaded 2-core machine."""
AUDIT_TIMEOUT = 180.0


@pytest.fixture(scope="module")
def spark_class() -> Path:
    require_spark()
    import pyspark

    script = Path(pyspark.__file__).parent / "bin" / "spark-class"
    assert script.exists(), f"the installed PySpark has no {script}"
    return script


def _env(tmp_path: Path) -> dict[str, str]:
    """Everything on 127.0.0.1; no REST submission server (it would take port 6066)."""
    return {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        "SPARK_LOG_DIR": str(tmp_path / "logs"),
        "PYSPARK_PYTHON": sys.executable,
    }


class Cluster:
    """The processes of one standalone cluster, each in its own process group."""

    def __init__(self, spark_class: Path, tmp_path: Path) -> None:
        self.spark_class = spark_class
        self.path = tmp_path
        self.env = _env(tmp_path)
        self.processes: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, name: str, *args: str) -> Path:
        """Start ``spark-class ARGS``; its output goes to ``NAME.log``, which is returned."""
        log = self.path / f"{name}.log"
        with log.open("wb") as output:
            process = subprocess.Popen(
                [str(self.spark_class), *args],
                stdout=output,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.path,
                start_new_session=True,
            )
        self.processes.append((process, log))
        return log

    def wait_for(self, log: Path, pattern: str) -> re.Match[str]:
        """The first match of ``pattern`` in ``log``, waited for up to STARTUP_TIMEOUT."""
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            found = re.search(pattern, log.read_text(errors="replace"))
            if found is not None:
                return found
            process = next(p for p, path in self.processes if path == log)
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"{log.name}: no {pattern!r} (exit code {process.returncode}):\n"
                    + log.read_text(errors="replace")[-4000:]
                )
            time.sleep(0.1)  # a JVM's log file: no event to wait on

    def stop(self) -> None:
        """End every process group by its id: TERM, then KILL what is still there."""
        for process, _ in self.processes:
            _signal_group(process, signal.SIGTERM)
        for process, _ in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait(timeout=20)


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)


@pytest.fixture
def cluster(spark_class: Path, tmp_path: Path) -> Iterator[tuple[str, list[Path]]]:
    """A master and two workers (one core, 1 GiB each): its URL and the workers' folders."""
    made = Cluster(spark_class, tmp_path)
    try:
        master_log = made.start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--webui-port",
            "0",
        )
        url = made.wait_for(master_log, r"Starting Spark master at (spark://127\.0\.0\.1:\d+)")[1]
        made.wait_for(master_log, r"I have been elected leader")
        work_dirs = []
        logs = []
        for index in range(2):
            work = tmp_path / f"worker-{index}"
            work.mkdir()
            work_dirs.append(work)
            logs.append(
                made.start(
                    f"worker-{index}",
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--webui-port",
                    "0",
                    "--cores",
                    "1",
                    "--memory",
                    "1g",
                    "--work-dir",
                    str(work),
                    url,
                )
            )
        for log in logs:
            made.wait_for(log, r"Successfully registered with master")
        yield url, work_dirs
    finally:
        made.stop()


def _write_run(run_dir: Path) -> None:
    """A run with losses, duplicates, reorders, failed and unknown sends, pauses, memory
    samples and a fault: every part of the report has something to count."""
    chooser = random.Random(16)
    log = RunLog(run_dir)
    for producer, node in (("p0", "a"), ("p1", "b")):
        for seq in range(1500):
            at = seq * 3.0
            latency = chooser.choice([1.0, 2.0, 4.0, 9.0, 30.0, 250.0])
            fate = chooser.random()
            outcome: str | None = events.SEND_CONFIRMED
            receipts: tuple[float, ...] = (at + latency,)
            if fate < 0.01:
                receipts = ()  # lost
            elif fate < 0.02:
                receipts = (at + latency, at + latency + 1)  # duplicated
            elif fate < 0.03:
                receipts = (at + 400,)  # late: after later ones
            elif fate < 0.04:
                outcome = events.SEND_UNKNOWN
            elif fate < 0.045:
                outcome = events.SEND_FAILED
            log.message(producer, seq, at, outcome=outcome, receipts=receipts, node=node)
    log.add("producer-p0", events.FLOW_PAUSED, 500, detail="confirmation-window")
    log.add("producer-p0", events.FLOW_RESUMED, 900)
    log.add("consumer-0", events.FLOW_PAUSED, 3000)
    for at, size in ((0, 100 * MS), (1500, 150 * MS), (4000, 120 * MS)):
        log.add("node-a", events.RSS_SAMPLE, at, size=size)
    log.add("node-a", events.FAULT_INJECTED, 2000, node="a", detail="kill -9")
    log.close()


def _audit_on(master: str, run_dir: Path, out: Path, env: dict[str, str]) -> None:
    """``python -m bridge.audit RUN_DIR --master MASTER --out OUT`` in its own process group,
    ended by its id if it does not finish in time."""
    argv = [sys.executable, "-m", "bridge.audit", str(run_dir), "--master", master]
    argv += ["--out", str(out), "--driver-memory", "1g"]
    process = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=AUDIT_TIMEOUT)
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGKILL)
        output, _ = process.communicate()
        raise AssertionError(
            f"the audit on {master} took over {AUDIT_TIMEOUT}s:\n{output!r}"
        ) from None
    finally:
        _signal_group(process, signal.SIGKILL)  # the driver's JVM, should it linger
    assert process.returncode == 0, output.decode(errors="replace")[-4000:]


@pytest.mark.timeout(600)  # six JVMs and two audits: minutes on a loaded 2-core machine
def test_the_audit_on_a_standalone_cluster_reports_what_local_mode_does(
    spark: Any, cluster: tuple[str, list[Path]], tmp_path: Path
) -> None:
    url, work_dirs = cluster
    run_dir = tmp_path / "run"
    _write_run(run_dir)

    local = audit(spark, run_dir, tmp_path / "local")
    _audit_on(url, run_dir, tmp_path / "cluster", _env(tmp_path))
    on_cluster = json.loads((tmp_path / "cluster" / "report.json").read_text())

    assert (local["audit"]["master"], on_cluster["audit"]["master"]) == ("local[2]", url)
    for worker in work_dirs:  # each worker ran an executor of the audit
        assert [p.name for p in worker.iterdir() if p.name.startswith("app-")], worker
    assert local["delivery"]["lost"] > 0 and local["delivery"]["duplicated"] > 0
    assert local["delivery"]["order_violations"] > 0 and local["pauses"]["count"] == 2
    del local["audit"], on_cluster["audit"]  # how long it took, and where
    assert _rounded(on_cluster) == _rounded(json.loads(json.dumps(local)))


def _rounded(value: Any) -> Any:
    """``value`` with its floats to 12 significant digits: a sum's last bits depend on the
    order in which partial aggregates meet, which no master fixes."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    return value
