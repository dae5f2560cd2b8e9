"""Hostile clients against real node processes, at a fifth of the reported scale: the
node's resident memory (from /proc) stays within bounds while they attack, and comes back
once they are gone, with the node's cycle collector off (``benchmarks.hostile`` runs the
same attacks at ten times the scale and times a well-behaved client meanwhile).

- 10 core connections that announce a 4 MiB frame before login and send all of it but a
  byte: each is refused at its header (``max-prelogin-frame-size``), so the node holds
  nothing of them;
- 10 STOMP connections that CONNECT and send all of a 4 MiB body but a byte, then go
  silent: together they hold at most the ``partial-frame-budget`` (plus each one's
  pre-login allowance); those that would take more are closed;
- waves of such STOMP connections, each closed by the client: with the node's cycle
  collector off, what a closed connection held must be freed at once, or it piles up;
- 6 wrong STOMP logins at once, each as a different unknown user, on a node with security
  on: at most ``max-concurrent-hashes`` scrypt hashes (128 MiB each) are held at once.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.hostile import CASES, main, run_case
from transport.allocator import DEFAULT_TRIM_THRESHOLD

MIB = 1024 * 1024
BUDGET = 8 * MIB
SCALE = 0.2
SLACK = 16 * MIB
"""Growth of a node under load that is not the attack's: allocator arenas, the
well-behaved client's messages, the attackers' sockets."""
WAVE_GROWTH = 8 * MIB
"""How much the RSS may grow from the first wave to the last (each wave sends 40 MiB)."""


@pytest.mark.parametrize(
    ("case", "bound"),
    [
        ("core-prelogin", SLACK),
        ("stomp-partial", BUDGET + SLACK),
        ("login-flood", CASES["login-flood"].hashing_budget + SLACK),
    ],
)
def test_attackers_cost_the_node_at_most_the_budgets(tmp_path: Path, case: str, bound: int):
    result = run_case(case, SCALE, tmp_path, budget=BUDGET)
    assert result.peak_rss - result.idle_rss <= bound, result
    assert result.sends > 0, "the well-behaved client sent nothing during the attack"


def test_memory_comes_back_after_waves_of_closed_connections(tmp_path: Path):
    """What a wave held is freed (to the allocator, which keeps some of it for reuse, up
    to its trim threshold) before the next: the RSS after the last wave is about that
    after the first, not one wave's worth higher per wave."""
    result = run_case("stomp-waves", SCALE, tmp_path, budget=BUDGET)
    first, *_, last = result.marks
    assert last - first <= WAVE_GROWTH, result
    assert result.after_rss - result.idle_rss <= DEFAULT_TRIM_THRESHOLD + SLACK, result


def test_the_benchmark_reports_every_case(tmp_path: Path):
    output = tmp_path / "hostile.json"
    assert main(["--scale", "0.1", "--output", str(output)]) == 0
    report = json.loads(output.read_text())
    assert [case["case"] for case in report["cases"]] == list(CASES)
    for case in report["cases"]:
        assert 0 < case["idle_rss"] <= case["peak_rss"] and case["sends"] > 0
    # The goal allows the configured budgets: partial frames, and where security is on,
    # max-concurrent-hashes (2) scrypt hashes.
    budgets = {case["case"]: case["budgets"] for case in report["cases"]}
    partial = report["partial_frame_budget"]
    assert budgets == dict.fromkeys(CASES, partial) | {
        "login-flood": partial + 2 * report["hash_memory"]
    }
