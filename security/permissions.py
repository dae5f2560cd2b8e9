"""The permissions a security setting grants to roles."""

from __future__ import annotations

import enum


class Permission(enum.StrEnum):
    """One thing a user may do on an address (names as in the configuration file)."""

    SEND = "send"
    CONSUME = "consume"
    BROWSE = "browse"
    CREATE_ADDRESS = "create-address"
    DELETE_ADDRESS = "delete-address"
    CREATE_DURABLE_QUEUE = "create-durable-queue"
    DELETE_DURABLE_QUEUE = "delete-durable-queue"
    CREATE_NON_DURABLE_QUEUE = "create-non-durable-queue"
    DELETE_NON_DURABLE_QUEUE = "delete-non-durable-queue"
    MANAGE = "manage"


PERMISSION_NAMES: frozenset[str] = frozenset(p.value for p in Permission)
