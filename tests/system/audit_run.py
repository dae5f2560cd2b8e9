"""The audit pipeline for a system test's event logs (``audit(spark, run_dir)``, on the
run's one Spark session, the ``spark`` fixture, through ``deferToThread``), and the checks
of a failover run with it (kill -9 under core and under STOMP). ``txbridge audit``, the
command, is tested in tests/audit."""

from __future__ import annotations

from typing import Any

from bridge.audit.pipeline import audit
from tests.audit.conftest import require_spark

__all__ = ["audit", "check_failover", "require_spark"]


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
