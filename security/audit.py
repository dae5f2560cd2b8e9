"""The security audit log: one line per login (successful or not) and per denied
operation, never a password.

Every line starts with the same five fields, who, from where, over which protocol, what
and the outcome, then the details of that kind of line::

    user=alice remote=10.0.0.7:53211 protocol=core action=login outcome=success \
method=password roles=producers
    user=alice remote=10.0.0.7:53211 protocol=core action=send outcome=denied \
address=orders.eu queue=- match="orders.#"

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


def audit(
    logger: logging.Logger,
    level: int,
    *,
    user: str | None,
    remote: str,
    protocol: str,
    action: str,
    outcome: str,
    **details: AuditValue,
) -> None:
    """Log one audit line: who (``user``), from where (``remote``), ``protocol``, what
    (``action``: ``login`` or a permission), ``outcome``, then ``details`` in the order
    given."""
    if not logger.isEnabledFor(level):
        return
    record: dict[str, AuditValue] = {
        "user": user,
        "remote": remote,
        "protocol": protocol,
        "action": action,
        "outcome": outcome,
        **details,
    }
    logger.log(level, "%s", format_line(record), extra={"audit": record})
