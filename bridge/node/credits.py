"""Credit given back to a connection's producers, per address, for any head that grants
it (core's PRODUCER_CREDITS; Artemis's producer window).

The bytes of every send are granted back at the end of the turn it was handled in,
gathered per address, so a turn's sends cost one grant each address. An address full
under the BLOCK policy gets nothing until it has room: its grants are withheld (adding up
meanwhile) and given, in one, on the turn after the room appears
(``ServerSession.wait_for_room``).
"""

from __future__ import annotations

from collections.abc import Callable

from bridge.node.session import ServerSession


class ProducerCredits:
    """One connection's grants of producer credit, gathered and withheld."""

    def __init__(self, node: ServerSession, give: Callable[[str, int], None]) -> None:
        """``give(address, credits)``: the head tells the producer now."""
        self._node = node
        self._give = give
        self._grants: dict[str, int] = {}
        self._withheld: dict[str, int] = {}

    def grant(self, address: str, credits: int) -> None:
        """``credits`` more for ``address``, given at ``flush`` (the end of the turn)."""
        self._grants[address] = self._grants.get(address, 0) + credits

    @property
    def gathered(self) -> bool:
        """Whether grants wait for ``flush``."""
        return bool(self._grants)

    def flush(self) -> None:
        """Give what was gathered, except to addresses that must wait for room."""
        grants, self._grants = self._grants, {}
        for address, credits in grants.items():
            self._flush_one(address, credits)

    def _flush_one(self, address: str, credits: int) -> None:
        node = self._node
        if node.waiting_for_room(address):
            self._withheld[address] += credits
            return
        if not node.full_under_block(address):
            self._give(address, credits)
            return

        def room() -> None:
            self._give(address, self._withheld.pop(address))

        self._withheld[address] = credits
        node.wait_for_room(address, room)
