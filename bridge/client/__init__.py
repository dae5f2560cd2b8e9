"""The Python client of the core protocol: a Twisted API and a blocking facade."""

from bridge.client.events import AddressInfo

__all__ = ["AddressInfo"]
