"""Bytes on the wire: framed connections over Twisted that say when they can take more.

This package knows nothing of queues, messages or users; the node, the client, bridges and
replication build on it.
"""
