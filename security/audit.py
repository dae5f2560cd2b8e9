"""The audit log: one line per failed login and per denied operation, never a password.

Lines are ``key=value`` pairs in a fixed order, for example::

    event=permission-denied user=alice permission=send address=orders.eu queue=- \
protocol=core remote=10.0.0.7:53211 match="orders.#"

A value that is not a plain token is written as a JSON string, so user-supplied names
cannot forge lines or fields. The same fields are on the record as ``record.audit``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping

AUDIT_LOGGER_NAME = "txbridge.security.audit"
audit_logger = logging.getLogger(AUDIT_LOGGER_NAME)

_TOKEN = re.compile(r"[A-Za-z0-9_.:@/#*+,\[\]-]+")

AuditValue = str | int | float | None


def format_value(value: AuditValue) -> str:
    """One field's value as written in a line: ``-`` for None, a plain token as is, and
    anything else as a JSON string, so that a user-supplied name cannot add fields or
    lines."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    text = str(value)
    return text if _TOKEN.fullmatch(text) else json.dumps(text)


def format_line(fields: Mapping[str, AuditValue]) -> str:
    """``key=value`` pairs in the order of ``fields``, separated by spaces."""
    return " ".join(f"{key}={format_value(value)}" for key, value in fields.items())


def audit(logger: logging.Logger, level: int, event: str, **fields: AuditValue) -> None:
    """Log one audit line; ``fields`` are written in the order given."""
    if not logger.isEnabledFor(level):
        return
    record = {"event": event, **fields}
    logger.log(level, "%s", format_line(record), extra={"audit": record})
