"""What a closed connection gives back (``bridge.node.give_back``), without a reactor: its
transactions rolled back, then its consumers closed, then its own queues dropped, in that
order, a failing step logged and the rest done all the same."""

from __future__ import annotations

from typing import Any

import pytest_twisted
from twisted.internet.defer import Deferred, succeed

from bridge.node.give_back import give_back
from bridge.node.local import LocalTransaction, LocalTransactions


class _Broker:
    def __init__(self, done: list[str]) -> None:
        self.done = done
        self.opened = 0

    def begin(self) -> int:
        self.opened += 1
        return self.opened

    async def rollback(self, tx: int) -> None:
        self.done.append(f"rollback {tx}")
        if tx == 1:
            raise OSError("the store failed")


class _Consumer:
    def __init__(self, name: str, done: list[str]) -> None:
        self.name, self.done = name, done

    def close(self) -> Deferred[None]:
        self.done.append(f"close {self.name}")
        return succeed(None)


class _Addressing:
    def __init__(self, done: list[str]) -> None:
        self.done = done

    def close(self) -> list[str]:
        return ["q1", "q2"]

    async def drop(self, name: str) -> None:
        self.done.append(f"drop {name}")


@pytest_twisted.ensureDeferred
async def test_a_closed_connection_gives_back_in_order_whatever_fails() -> None:
    done: list[str] = []
    transactions: LocalTransactions[str, LocalTransaction] = LocalTransactions(
        _Broker(done),  # type: ignore[arg-type]
        LocalTransaction,
    )
    transactions.begin("a")
    transactions.begin("b")
    consumers: list[Any] = [_Consumer("c1", done), _Consumer("c2", done)]
    await give_back(transactions, consumers, _Addressing(done), "a test connection")  # type: ignore[arg-type]
    assert done == [
        "rollback 1",  # failed: logged
        "rollback 2",
        "close c1",
        "close c2",
        "drop q1",
        "drop q2",
    ]
    assert transactions.get("a") is None and transactions.get("b") is None
