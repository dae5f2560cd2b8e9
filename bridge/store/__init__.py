"""The message store: durable messages, queues, delivery counts and duplicate ids.

``IMessageStore`` is the seam the node uses. ``MessageStore`` implements it once, with
group commit, over a backend's ``IStoreWriter``: ``SQLiteMessageStore`` is the embedded
default; ``bridge.store.postgresql.PostgreSQLMessageStore`` keeps the data on a PostgreSQL
server (a module of its own, so that psycopg is loaded only by a node that uses it).
"""

from bridge.store.errors import (
    CommitFailed,
    Fenced,
    InvalidOperation,
    SchemaTooNew,
    StoreError,
    StoreNotOpen,
    TransactionRolledBack,
    UnknownTransaction,
    Unsettled,
)
from bridge.store.front import MessageStore
from bridge.store.interfaces import IMessageStore, IStoreWriter
from bridge.store.records import QueueRecord, Recovered, RecoveredMessage, TxId
from bridge.store.sqlite import SQLiteMessageStore

__all__ = [
    "CommitFailed",
    "Fenced",
    "IMessageStore",
    "IStoreWriter",
    "InvalidOperation",
    "MessageStore",
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
    "Unsettled",
]
