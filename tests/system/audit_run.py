"""The audit pipeline run on a system test's event logs, in its own process, and the
checks of a failover run with it (kill -9 under core and under STOMP)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.audit.conftest import require_spark
from tests.processes import ROOT

__all__ = ["audit", "check_failover", "require_spark"]


def audit(run_dir: Path) -> dict[str, Any]:
    """``python -m bridge.audit`` on local[2], in its own process: the report's figures."""
    out = run_dir / "report"
    result = subprocess.run(
        [sys.executable, "-m", "bridge.audit", str(run_dir), "--master", "local[2]"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    return report


def check_failover(
    report: dict[str, Any],
    count: int,
    received: list[tuple[int, bool]],
    nodes: frozenset[str] = frozenset({"a", "b"}),
    producer: str | None = None,
) -> None:
    """A run of ``count`` sends across a failover from node a to node b, with the
    consumer's ``received`` (sequence number, flagged as redelivered): every message
    confirmed and received, none lost or unexpected, confirmations by both nodes, the
    audit's repeats the consumer's, and each repeat flagged; confirmations by ``nodes``.
    With ``producer``, the figures are that producer's, in a run of several."""
    seen: set[int] = set()
    for seq, redelivered in received:
        if seq in seen:
            assert redelivered, f"message {seq} came twice, the second time not as a redelivery"
        seen.add(seq)
    delivery = report["delivery"]
    figures = delivery if producer is None else delivery["per_producer"][producer]
    assert figures["confirmed"] == count, figures
    assert figures["lost"] == 0, delivery["examples"]
    assert figures["unexpected"] == 0, delivery["examples"]
    assert figures["received"] == count, figures
    assert figures["duplicate_deliveries"] == len(received) - count, figures
    assert set(delivery["per_node"]) == nodes, delivery["per_node"]
