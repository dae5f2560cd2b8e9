"""The log of ``txbridge node``: twistd's text lines, stamped to the microsecond.

Second stamps cannot order what two nodes did within one second (one stopped serving, the
other became live), which is what an operator reads after a failover, and what the
partition tests check; the lines are otherwise twistd's own.
"""

from __future__ import annotations

import sys

from twisted.logger import ILogObserver, textFileLogObserver

TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%f%z"


def observer() -> ILogObserver:
    """twistd's ``--logger``: text lines to standard output."""
    return textFileLogObserver(sys.stdout, timeFormat=TIME_FORMAT)
