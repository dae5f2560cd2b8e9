"""The client's open transactions across lost connections, sans-IO.

A node rolls back every transaction of a connection it loses. Over a reconnect (the same
node back, or its backup after a failover) a transaction is then one of:

- begun and unused (nothing sent or acknowledged in it): begun again on the next
  connection, unseen by the application;
- used: *rollback-only*. Its commit, sends and acks raise ``TransactionRolledBack``; its
  rollback succeeds; the application runs the work again in a new transaction;
- its begin unanswered at the drop: gone (the begin itself failed with ``ConnectionLost``).
"""

from __future__ import annotations

from collections.abc import Collection

from bridge.client.errors import ConnectionLost, TransactionRolledBack


class Transactions:
    """Which transactions are open, used, rollback-only, or to be begun again."""

    def __init__(self) -> None:
        self._open: dict[int, bool] = {}
        """Open on the node (or about to be), each with whether it was used."""
        self._rollback_only: set[int] = set()
        self._again: list[int] = []

    def begun(self, tx_id: int) -> None:
        self._open[tx_id] = False

    def refused(self, tx_id: int) -> None:
        """The node refused to begin it."""
        self._open.pop(tx_id, None)

    def use(self, tx_id: int) -> None:
        """A send or an ack in ``tx_id``: raises if the transaction cannot take it."""
        if tx_id in self._rollback_only:
            raise self.rolled_back(tx_id)
        if tx_id not in self._open:
            raise _not_open(tx_id)
        self._open[tx_id] = True

    def __contains__(self, tx_id: int) -> bool:
        """Open: a commit or rollback of it goes to the node."""
        return tx_id in self._open

    def ended(self, tx_id: int) -> None:
        """An open transaction's commit or rollback went to the node."""
        del self._open[tx_id]
        if tx_id in self._again:
            self._again.remove(tx_id)

    def outcome(self, tx_id: int, *, commit: bool) -> TransactionRolledBack | None:
        """A commit or rollback of a transaction that is not open, settled at once: a
        rollback-only one's commit fails and its rollback succeeds; a rollback of one
        ended already succeeds. Raises for a commit of one that is not open at all."""
        if tx_id in self._rollback_only:
            self._rollback_only.discard(tx_id)
            return self.rolled_back(tx_id) if commit else None
        if commit:
            raise _not_open(tx_id)
        return None

    def lost(self, unanswered: Collection[int]) -> None:
        """The connection is gone: the node rolled back every open transaction.
        ``unanswered``: those whose begin it had not answered."""
        for tx_id, used in list(self._open.items()):
            if tx_id in unanswered:
                del self._open[tx_id]
            elif used:
                del self._open[tx_id]
                self._rollback_only.add(tx_id)
            elif tx_id not in self._again:
                self._again.append(tx_id)

    def begin_again(self) -> list[int]:
        """On a new connection: the unused transactions to begin again, in order."""
        again, self._again = self._again, []
        return again

    def clear(self) -> None:
        self._open.clear()
        self._rollback_only.clear()
        self._again.clear()

    @staticmethod
    def rolled_back(tx_id: int) -> TransactionRolledBack:
        return TransactionRolledBack(
            f"transaction {tx_id} was rolled back: the connection to the node was lost "
            "after it sent or acknowledged something; roll it back and run it again"
        )


def _not_open(tx_id: int) -> ConnectionLost:
    return ConnectionLost(
        f"transaction {tx_id} is not open: its begin was lost with the connection, or it "
        "was committed or rolled back already"
    )
