"""What the audit derives from the check before Spark works: the shuffle partitions for the
run's size, and the packing of a timestamp with a name into one long (refused, with the
reason, for a run too long to pack)."""

from __future__ import annotations

import pytest

from bridge.audit.figures import packable
from bridge.audit.pipeline import EVENTS_PER_PARTITION, partitions_for
from bridge.audit.read import AuditError, Checked

NS = 1_000_000_000


def _checked(span_ns: int) -> Checked:
    return Checked(
        runs=("r1",),
        processes=("consumer-0", "producer-p0"),
        nodes=("a", "b"),
        events=10,
        per_kind={},
        skipped={},
        unidentified={},
        start_ns=1_700_000_000 * NS,
        end_ns=1_700_000_000 * NS + span_ns,
    )


@pytest.mark.parametrize(
    ("events", "cores", "expected"),
    [
        (0, 2, 2),
        (60_000, 2, 2),
        (EVENTS_PER_PARTITION * 3, 2, 3),
        (EVENTS_PER_PARTITION * 3 + 1, 2, 4),
        (30_000_000, 2, 30),
        (150_000_000, 2, 150),
        (1_000_000, 8, 8),
    ],
)
def test_shuffle_partitions_follow_the_events_with_one_per_core_at_least(
    events: int, cores: int, expected: int
) -> None:
    assert partitions_for(events, cores) == expected


def test_names_pack_with_every_timestamp_of_a_run_of_years() -> None:
    checked = _checked(3 * 365 * 86_400 * NS)
    assert packable(checked.nodes, checked) == ("a", "b")


def test_a_run_too_long_to_pack_is_refused_with_the_reason() -> None:
    checked = _checked(2**62)
    with pytest.raises(AuditError, match=r"spans .* s with 2 processes and nodes: too long"):
        packable(checked.processes, checked)
