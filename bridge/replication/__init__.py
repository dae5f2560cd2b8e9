"""Replication of a live node's SQLite store to a backup (docs/ha.md)."""
