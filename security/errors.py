"""What the security store raises: refusals to clients and operators (``SecurityError``),
and ``ConfigError`` to whoever wrote a bad file."""

from __future__ import annotations


class SecurityError(Exception):
    """Base of the refusals the security store raises: a login refused, a permission lacking."""


class AuthenticationFailed(SecurityError):
    """A login was refused.

    The message is the same whatever the cause (unknown user, wrong password, unmapped
    certificate, back-off after repeated failures), so a client cannot tell which it was;
    the audit log tells the operator.
    """

    def __init__(self, message: str = "authentication failed") -> None:
        super().__init__(message)


class LoginsBusy(AuthenticationFailed):
    """A login was refused before any check because the node is already hashing (and
    queueing) as many logins as ``max-concurrent-hashes`` and ``max-queued-logins`` allow:
    the client may try again later. It says nothing about the credentials."""

    def __init__(self, hashing: int, queued: int) -> None:
        super().__init__(
            f"the node is busy with other logins ({hashing} hashing, {queued} waiting); "
            "try again later"
        )


class PermissionDenied(SecurityError):
    """An authenticated user lacks a permission on an address (and queue)."""

    def __init__(self, user: str, permission: str, address: str, queue: str | None = None) -> None:
        self.user = user
        self.permission = permission
        self.address = address
        self.queue = queue
        where = f"address {address!r}" + (f" queue {queue!r}" if queue is not None else "")
        super().__init__(f"user {user!r} lacks permission {permission!r} on {where}")


class ConfigError(Exception):
    """A configuration, users or certificate mapping file is wrong.

    The message names the file, the key (a dotted path such as
    ``security.setting[2].send``) and what was expected. Not a ``SecurityError``: a bad
    file is the operator's mistake, not a refused login or operation, so whatever reports
    refusals to a client must never catch it. It lives here because the security files'
    readers raise it and the security package imports nothing of ``bridge``; the node's
    configuration (``bridge.config``) raises the same error.
    """

    def __init__(self, source: str, key: str, expected: str) -> None:
        self.source = source
        self.key = key
        self.expected = expected
        where = f"{source}: {key}" if key else source
        super().__init__(f"{where}: {expected}")
