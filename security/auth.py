"""A login attempt as a plain value, for heads that have no object of their own to adapt
to :class:`~security.interfaces.ISecurityAuth`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs
from zope.interface import implementer

from security.interfaces import ISecurityAuth

if TYPE_CHECKING:
    from cryptography import x509


@implementer(ISecurityAuth)
@attrs.frozen
class SecurityAuth:
    """A plain :class:`ISecurityAuth`, for heads that have no object of their own to adapt."""

    user: str | None = None
    password: str | None = attrs.field(default=None, repr=False)
    peer_certificates: Sequence[x509.Certificate] = ()
    remote_address: str = ""
    protocol: str = ""
