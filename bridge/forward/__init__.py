"""Core bridges: store-and-forward from a local queue to a remote address.

A bridge consumes its source queue inside the node and sends to its target through the
core client, taking a message only while the target connection is writable, its
confirmation window has room and the target granted producer credit. It acknowledges a
source message only once the target confirmed it. docs/bridges.md is the guide.
"""
