"""The Python client of the core protocol: a Twisted API and a blocking facade."""

from bridge.client.session import AddressInfo

__all__ = ["AddressInfo"]
