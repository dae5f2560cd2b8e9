"""The STOMP 1.0/1.1/1.2 head: STOMP connections as node sessions (docs/stomp.md)."""

from bridge.heads.stomp.frames import Command, Frame, FrameError, FrameParser, Limits, Version
from bridge.heads.stomp.protocol import StompHead, StompProtocol
from bridge.heads.stomp.session import StompSession
from bridge.heads.stomp.settings import StompSettings

__all__ = [
    "Command",
    "Frame",
    "FrameError",
    "FrameParser",
    "Limits",
    "StompHead",
    "StompProtocol",
    "StompSession",
    "StompSettings",
    "Version",
]
