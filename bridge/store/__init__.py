"""The message store: durable messages, queues, delivery counts and duplicate ids.

``IMessageStore`` is the seam the node uses; ``SQLiteMessageStore`` is the embedded
default, with group commit.
"""

from bridge.store.errors import (
    CommitFailed,
    InvalidOperation,
    SchemaTooNew,
    StoreError,
    StoreNotOpen,
    TransactionRolledBack,
    UnknownTransaction,
)
from bridge.store.interfaces import IMessageStore
from bridge.store.records import QueueRecord, Recovered, RecoveredMessage, TxId
from bridge.store.sqlite import SQLiteMessageStore

__all__ = [
    "CommitFailed",
    "IMessageStore",
    "InvalidOperation",
    "QueueRecord",
    "Recovered",
    "RecoveredMessage",
    "SQLiteMessageStore",
    "SchemaTooNew",
    "StoreError",
    "StoreNotOpen",
    "TransactionRolledBack",
    "TxId",
    "UnknownTransaction",
]
