"""The node's security audit log: the ``txbridge.security.audit`` records of the security
store (a standard-library logger, since the ``security`` package knows nothing of Twisted)
go to the node's Twisted log under the same namespace, successful logins (INFO) included.

Without this a standard-library record with no handler falls to Python's last-resort
handler: warnings only, written to stderr, which twistd logs as ``[stderr#error]``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from twisted.logger import Logger, LogLevel
from twisted.python.threadable import isInIOThread

from security.audit import AUDIT_LOGGER_NAME, audit_logger

_LEVELS = {
    logging.DEBUG: LogLevel.debug,
    logging.INFO: LogLevel.info,
    logging.WARNING: LogLevel.warn,
    logging.ERROR: LogLevel.error,
    logging.CRITICAL: LogLevel.critical,
}


class TwistedAuditHandler(logging.Handler):
    """Re-emits each audit record as one Twisted log event: the line as written, and its
    fields as ``audit``. Records made in worker threads (logins hash there) are handed to
    the reactor thread first, so the log is only ever written from there."""

    def __init__(self, reactor: Any) -> None:
        super().__init__(logging.INFO)
        self._reactor = reactor
        self._log = Logger(namespace=AUDIT_LOGGER_NAME)

    def emit(self, record: logging.LogRecord) -> None:
        level = _LEVELS.get(record.levelno, LogLevel.warn)
        line = record.getMessage()
        fields = getattr(record, "audit", None)
        if isInIOThread():
            self._emit(level, line, fields)
        else:
            self._reactor.callFromThread(self._emit, level, line, fields)

    def _emit(self, level: LogLevel, line: str, fields: object) -> None:
        self._log.emit(level, "{line}", line=line, audit=fields)


def route_audit_log(reactor: Any) -> Callable[[], None]:
    """Send the audit log to the Twisted log, INFO and above; the function returned
    undoes it. Records still propagate to any standard-library handlers an embedding
    application set up; having a handler of its own, the logger no longer falls to the
    last-resort one (stderr)."""
    handler = TwistedAuditHandler(reactor)
    level = audit_logger.level
    audit_logger.addHandler(handler)
    audit_logger.setLevel(logging.INFO)

    def undo() -> None:
        audit_logger.removeHandler(handler)
        audit_logger.setLevel(level)

    return undo
