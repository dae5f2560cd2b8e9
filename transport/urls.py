"""Connection URLs: ``tcp://host:port`` and ``tls://host:port?cert=...&key=...``; either
may say how long a connection attempt may take (``connect-timeout-millis``, Artemis's
connector parameter)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from urllib.parse import parse_qsl, urlsplit

import attrs

from transport.errors import URLError
from transport.tls import TLSConfig

SCHEMES = ("tcp", "tls")
TLS_OPTIONS = ("cert", "key", "ca", "verify-client", "server-name")
PATH_OPTIONS = ("cert", "key", "ca")
CONNECT_OPTIONS = ("connect-timeout-millis",)
DEFAULT_CONNECT_TIMEOUT = 30.0
"""Seconds a connection attempt may take unless its URL says (what every attempt took
before the option)."""
_TRUE = ("true", "yes", "1", "on")
_FALSE = ("false", "no", "0", "off")


def _frozen(options: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(options))


@attrs.frozen
class URL:
    """A parsed connection URL."""

    scheme: str
    host: str
    port: int
    options: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen)

    @property
    def is_tls(self) -> bool:
        return self.scheme == "tls"

    @property
    def connect_timeout(self) -> float:
        """Seconds a connection attempt may take before it counts as failed: an address
        that drops what is sent to it (a partitioned host) answers nothing, and a client
        given several URLs tries the next only then."""
        millis = self.options.get("connect-timeout-millis")
        return DEFAULT_CONNECT_TIMEOUT if millis is None else int(millis) / 1000

    def tls_config(self, base: TLSConfig | None = None) -> TLSConfig:
        """The TLS settings: ``base`` (from configuration) overridden by URL options."""
        config = base or TLSConfig()
        options = self.options

        def path(key: str, default: Path | None) -> Path | None:
            return Path(options[key]) if key in options else default

        verify = options.get("verify-client")
        return TLSConfig(
            cert=path("cert", config.cert),
            key=path("key", config.key),
            ca=path("ca", config.ca),
            verify_client=config.verify_client
            if verify is None
            else _boolean("verify-client", verify),
            server_name=options.get("server-name", config.server_name),
        )

    def relative_to(self, base: Path) -> URL:
        """This URL with its relative file options (cert, key, ca) taken as relative to
        ``base``, the folder of the configuration file that names it, not the working
        directory the process happens to start in."""
        options = {
            key: str(base / value) if key in PATH_OPTIONS else value
            for key, value in self.options.items()
        }
        return attrs.evolve(self, options=options)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def _boolean(key: str, value: str) -> bool:
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise URLError(f"URL option {key}={value!r}: expected true or false")


def parse_url(text: str) -> URL:
    """Parse and check a connection URL, naming what is wrong if it is not one."""
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as error:
        raise URLError(f"bad URL {text!r}: {error}") from None
    if parts.scheme not in SCHEMES:
        raise URLError(
            f"bad URL {text!r}: scheme must be one of {', '.join(SCHEMES)}, "
            f"got {parts.scheme or 'none'!r}"
        )
    if not parts.hostname:
        raise URLError(f"bad URL {text!r}: no host")
    if port is None:
        raise URLError(f"bad URL {text!r}: no port")
    if parts.path not in ("", "/") or parts.fragment or parts.username or parts.password:
        raise URLError(f"bad URL {text!r}: only scheme://host:port?options is allowed")
    try:
        pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise URLError(f"bad URL {text!r}: malformed options {parts.query!r}") from None
    options = dict(pairs) if parts.query else {}
    allowed = (TLS_OPTIONS if parts.scheme == "tls" else ()) + CONNECT_OPTIONS
    for key, value in options.items():
        if key not in allowed:
            raise URLError(
                f"bad URL {text!r}: unknown option {key!r} (known for {parts.scheme}: "
                f"{', '.join(allowed)})"
            )
        if key == "verify-client":
            _boolean(key, value)
        elif key == "connect-timeout-millis" and not (
            value.isascii() and value.isdigit() and int(value) > 0
        ):
            raise URLError(
                f"bad URL {text!r}: connect-timeout-millis={value!r}: expected a whole "
                "number of milliseconds above 0"
            )
    return URL(parts.scheme, parts.hostname, port, options)
