"""What can go wrong in a message store, each error saying which operation and why."""

from __future__ import annotations


class StoreError(Exception):
    """Base of every error a message store reports."""


class StoreNotOpen(StoreError):
    """An operation arrived before ``open()`` finished or after ``close()`` began."""


class SchemaTooNew(StoreError):
    """The data was written by a newer txbridge, whose schema this one cannot read."""


class CommitFailed(StoreError):
    """A batch could not be committed: none of its operations were written."""


class Fenced(CommitFailed):
    """A batch refused because the HA lease no longer carries the node's epoch (another
    node is live): none of its operations were written, and the node must stop serving."""


class Unsettled(StoreError):
    """A client's write is neither confirmed nor refused: the node stopped serving before
    its batch's outcome was settled (its backup may hold it or not), or a send queued
    before its write (early delivery) is queued though its write failed. It is sent again
    where the client goes next (a duplicate id tells whether it arrived)."""


class InvalidOperation(StoreError):
    """An operation was refused before anything was written (its arguments are wrong, or
    it names a queue or message the store does not hold). The rest of its batch is not
    affected."""


class UnknownTransaction(StoreError):
    """A transaction id that was never begun, or that was already committed or rolled back."""


class TransactionRolledBack(StoreError):
    """The operation belonged to a transaction that was rolled back: nothing of it was written."""
