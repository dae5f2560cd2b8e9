"""The drain's machine and progress, sans-IO: what it asks of the node's glue for each
thing that happens, and what its status shows (the glue and real nodes:
tests/system/test_drain.py)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from zope.interface import implementer

from bridge.ha.drain import Drain, DrainState, IDrainActions, QueueProgress, first_failover


@implementer(IDrainActions)
class Actions:
    """Records the calls; the test answers them."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def find_target(self) -> None:
        self.calls.append(("find_target",))

    def close(self) -> None:
        self.calls.append(("close",))

    def move(self, target: str, queues: tuple[str, ...]) -> None:
        self.calls.append(("move", target, queues))

    def stop(self) -> None:
        self.calls.append(("stop",))


MAP = {"a": ("b", "c"), "b": ("c", "a"), "c": ("a", "b")}


def drain(depths: dict[str, int] | None = None) -> tuple[Drain, Actions]:
    actions = Actions()
    now = depths if depths is not None else {}
    record = actions.calls.append
    machine = Drain("a", actions, lambda queue: now.get(queue, 0), lambda why: record(("!", why)))
    return machine, actions


def test_the_first_failover_node_is_the_target_and_emptied_queues_end_the_drain():
    depths = {"orders": 30, "audit": 5}
    machine, actions = drain(depths)
    assert machine.state is DrainState.SERVING
    machine.inputs.start()
    assert (machine.state, actions.calls) == (DrainState.DRAINING, [("find_target",)])
    machine.inputs.mapped(MAP)
    assert actions.calls[-1] == ("close",)
    assert machine.progress().target == "b"
    machine.inputs.closed({"orders": 30, "audit": 5, "empty": 0})
    assert actions.calls[-1] == ("move", "b", ("audit", "orders"))
    depths["orders"] = 12
    progress = machine.progress()
    assert progress.queues == (QueueProgress("audit", 5, 5), QueueProgress("orders", 30, 12))
    assert (progress.at_start, progress.left) == (35, 17)
    depths["audit"] = 0
    machine.inputs.emptied("audit")
    assert machine.state is DrainState.DRAINING
    depths["orders"] = 0
    machine.inputs.emptied("orders")
    assert (machine.state, actions.calls[-1]) == (DrainState.DRAINED, ("stop",))
    assert machine.progress().left == 0
    machine.inputs.emptied("orders")  # late news change nothing
    machine.inputs.failed("a bridge stopping with the node")
    assert machine.state is DrainState.DRAINED
    assert [call[0] for call in actions.calls].count("stop") == 1


def test_a_node_with_nothing_to_move_stops_once_closed():
    machine, actions = drain()
    machine.inputs.start()
    machine.inputs.mapped(MAP)
    machine.inputs.closed({"orders": 0})
    assert (machine.state, actions.calls[-1]) == (DrainState.DRAINED, ("stop",))
    assert machine.progress().queues == ()


def test_without_a_failover_node_the_drain_fails_before_closing_anything():
    machine, actions = drain()
    machine.inputs.start()
    machine.inputs.mapped({"a": ()})
    assert machine.state is DrainState.FAILED
    assert "no failover node" in machine.progress().reason
    assert actions.calls == [
        ("find_target",),
        ("!", "node a has no failover node in the cluster's map"),
    ]
    machine.inputs.start()  # asked again: it tries again
    assert (machine.state, actions.calls[-1]) == (DrainState.DRAINING, ("find_target",))
    assert machine.progress().reason == ""


def test_a_failure_while_moving_is_shown_with_its_reason_and_the_first_reason_stays():
    machine, actions = drain({"orders": 3})
    machine.inputs.start()
    machine.inputs.mapped(MAP)
    machine.inputs.closed({"orders": 3})
    machine.inputs.failed("the bridge of queue 'orders': no queue")
    machine.inputs.failed("another")
    machine.inputs.emptied("orders")
    progress = machine.progress()
    assert (progress.state, progress.reason) == (
        DrainState.FAILED,
        "the bridge of queue 'orders': no queue",
    )
    assert ("stop",) not in actions.calls
    assert [call for call in actions.calls if call[0] == "!"] == [
        ("!", "the bridge of queue 'orders': no queue")
    ]


def test_asked_twice_the_drain_goes_on_once():
    machine, actions = drain()
    machine.inputs.start()
    machine.inputs.start()
    machine.inputs.mapped(MAP)
    machine.inputs.start()
    assert actions.calls == [("find_target",), ("close",)]


@given(
    st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 50), max_size=6),
    st.permutations("abcdef"),
)
def test_the_drain_stops_once_exactly_when_the_last_nonempty_queue_empties(depths, order):
    machine, actions = drain(dict(depths))
    machine.inputs.start()
    machine.inputs.mapped(MAP)
    machine.inputs.closed(depths)
    moving = {name for name, depth in depths.items() if depth}
    for name in order:
        assert machine.state is (DrainState.DRAINING if moving else DrainState.DRAINED)
        moving.discard(name)
        machine.inputs.emptied(name)
    assert machine.state is DrainState.DRAINED
    assert [call for call in actions.calls if call[0] == "stop"] == [("stop",)]


def test_first_failover():
    assert first_failover("a", MAP) == "b"
    assert first_failover("a", {"a": ()}) is None
    assert first_failover("z", MAP) is None
