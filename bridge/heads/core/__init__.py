"""The core protocol head: core-protocol connections as node sessions."""

from bridge.heads.core.receiver import CoreHead, listen_core
from bridge.heads.core.session import DUPLICATE_ID_HEADER, CoreSession, SessionError

__all__ = ["DUPLICATE_ID_HEADER", "CoreHead", "CoreSession", "SessionError", "listen_core"]
