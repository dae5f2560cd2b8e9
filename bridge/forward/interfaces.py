"""The seam between the node's bridges and the management API."""

from __future__ import annotations

from typing import TYPE_CHECKING

from zope.interface import Interface

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

    from bridge.forward.status import BridgeSnapshot


class UnknownBridge(KeyError):
    """No bridge of that name."""


class IBridges(Interface):
    """A node's bridges, to read and operate (``txbridge ctl bridge ...``)."""

    def snapshots() -> list[BridgeSnapshot]:
        """Every bridge now, by name."""

    def start(name: str) -> Deferred[None]:
        """Start a stopped or failed bridge; UnknownBridge if there is none of that name."""

    def stop(name: str) -> Deferred[None]:
        """Stop a bridge: fires once its unconfirmed messages are back on its queue."""

    def pause(name: str) -> Deferred[None]:
        """Pause a bridge (it keeps its connection): fires as ``stop`` does."""

    def resume(name: str) -> Deferred[None]:
        """Resume a paused bridge."""

    def reload() -> Deferred[list[str]]:
        """Read the bridge files again: new bridges start, removed ones stop, changed ones
        restart. Fires with the errors (one line each, naming file and key) of the files
        that could not be used; their bridges keep running as they were."""
