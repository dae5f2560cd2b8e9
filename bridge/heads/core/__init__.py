"""The core protocol head: core-protocol connections as node sessions."""

from bridge.heads.core.errors import SessionError
from bridge.heads.core.receiver import CoreHead, listen_core
from bridge.heads.core.session import CoreSession
from bridge.node.broker import DUPLICATE_ID_HEADER

__all__ = ["DUPLICATE_ID_HEADER", "CoreHead", "CoreSession", "SessionError", "listen_core"]
