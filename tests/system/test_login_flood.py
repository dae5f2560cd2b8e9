"""A flood of wrong logins against a real node process: its memory stays bounded (at most
max-concurrent-hashes scrypt hashes of 128 MiB at once, the peak RSS read from /proc), the
real users still log in (the flood's host is slowed down, not locked out), and the
security audit log has one line per login, successes included, and never a password."""

from __future__ import annotations

import re
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import pytest_twisted
import tomli_w
from twisted.internet.threads import deferToThread

from security.passwords import hash_password
from tests.system.flow import rss
from tests.system.nodes import node_document

FLOOD = 30
HASH_MEMORY = 128 * 2**20  # scrypt at the default n = 2**17, r = 8
MAX_CONCURRENT_HASHES = 2
TIMEOUT = 120.0
ALICE, BOB = "alice-S3cret-pw", "bob-S3cret-pw"
WRONG = "wr0ng-Gue55-pw"


def stomp_login(port: int, user: str, password: str, source: str = "127.0.0.1") -> str:
    """CONNECT over a plain socket from ``source``; the first frame the node answers,
    without its NUL."""
    with socket.create_connection(
        ("127.0.0.1", port), timeout=TIMEOUT, source_address=(source, 0)
    ) as connection:
        connection.sendall(
            f"CONNECT\naccept-version:1.2\nhost:/\nlogin:{user}\npasscode:{password}\n\n\0".encode()
        )
        data = b""
        while b"\0" not in data:
            chunk = connection.recv(4096)
            if not chunk:
                break
            data += chunk
    return data.partition(b"\0")[0].decode()


def flood(port: int) -> list[str]:
    """FLOOD wrong logins at once, each for a different (unknown) user, so that no
    (host, user) refusal spares a hash: only the bound on hashing protects the node."""
    with ThreadPoolExecutor(max_workers=FLOOD) as pool:
        answers = [pool.submit(stomp_login, port, f"user{n}", WRONG) for n in range(FLOOD)]
        return [answer.result(timeout=TIMEOUT) for answer in answers]


@pytest.mark.system
@pytest_twisted.ensureDeferred
async def test_a_login_flood_keeps_memory_bounded_and_the_real_users_log_in(
    nodes, tmp_path: Path
) -> None:
    directory = tmp_path / "node"
    directory.mkdir()
    users = {
        "alice": {"password": hash_password(ALICE), "roles": ["users"]},  # the default cost
        "bob": {"password": hash_password(BOB), "roles": ["users"]},
    }
    (directory / "users.toml").write_text(tomli_w.dumps({"users": users}))
    document = node_document(
        acceptor=[{"name": "stomp", "url": "tcp://127.0.0.1:0", "protocols": ["stomp"]}],
        security={
            "users-file": "users.toml",
            "max-concurrent-hashes": MAX_CONCURRENT_HASHES,
            "failed-login-address-max-delay": "2s",
        },
    )
    node = await nodes(document).wait_started()
    assert node.pid is not None
    port = node.ports["stomp"]
    before = rss(node.pid)

    answers = await deferToThread(flood, port)

    peak = rss(node.pid, "VmHWM")
    assert len(answers) == FLOOD
    for answer in answers:
        assert answer.startswith("ERROR\n"), answer
        assert "message:authentication failed" in answer
    # Ten threads hashing at once took 1.3 GiB; the bound allows two (and a margin of one).
    assert peak - before < (MAX_CONCURRENT_HASHES + 1) * HASH_MEMORY, (before, peak)

    # Bob, from the flooded host, waits out its short delay and logs in; alice, whose
    # name the flood did not try, logs in from another address at once.
    bob = await deferToThread(stomp_login, port, "bob", BOB)
    assert bob.startswith("CONNECTED\n"), bob
    alice = await deferToThread(stomp_login, port, "alice", ALICE, "127.0.0.2")
    assert alice.startswith("CONNECTED\n"), alice

    # The audit log: its own namespace, one line per login, successes included.
    await node.stop()
    output = node.output
    assert "[stderr#error]" not in output
    for secret in (ALICE, BOB, WRONG):
        assert secret not in output
    audit = re.compile(
        r"\[txbridge\.security\.audit#(\w+)\] user=(\S+) remote=(\S+) protocol=stomp "
        r"action=login outcome=(\w+)"
    )
    lines = [found.groups() for found in audit.finditer(output)]
    successes = [
        (level, user, remote.rsplit(":", 1)[0])
        for level, user, remote, outcome in lines
        if outcome == "success"
    ]
    assert successes == [("info", "bob", "127.0.0.1"), ("info", "alice", "127.0.0.2")]
    failed = [line for line in lines if line[3] in ("failure", "busy")]
    assert len(failed) == FLOOD
    assert {level for level, *_ in failed} == {"warn"}
