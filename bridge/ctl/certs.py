"""``txbridge certs``: a development CA with node and client certificates."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from transport.tls import DEFAULT_SANS

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _file_name(text: str) -> str:
    if not _NAME.match(text) or text == "ca":
        raise argparse.ArgumentTypeError(
            f"{text!r}: use letters, digits, '.', '_' or '-' (and not 'ca')"
        )
    return text


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "certs",
        help="create a development CA and node/client certificates",
        description=(
            "Create (or reuse) a development CA in DIR and issue certificates from it: "
            "NAME.pem and NAME.key for each --node and --client. Not for production."
        ),
        epilog="example:\n  txbridge certs --dir certs --node node-a --client alice",
    )
    parser.add_argument("--dir", type=Path, default=Path("certs"), help="folder (default: certs)")
    parser.add_argument(
        "--node",
        action="append",
        default=[],
        type=_file_name,
        metavar="NAME",
        help="issue a node certificate (server and client use)",
    )
    parser.add_argument(
        "--client",
        action="append",
        default=[],
        type=_file_name,
        metavar="NAME",
        help="issue a client certificate with CN=NAME",
    )
    parser.add_argument(
        "--san",
        action="append",
        default=[],
        metavar="HOST",
        help=f"subject alternative name for node certificates (default: {', '.join(DEFAULT_SANS)})",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    # (here, not at the top: every txbridge command registers this one, and cryptography
    # costs a node that uses no TLS 14 MiB; bridge.ctl.lean)
    from transport.certs import DevelopmentCA  # noqa: PLC0415

    ca = DevelopmentCA.open_or_create(args.dir)
    print(f"CA        {ca.cert_path}")
    for name in args.node:
        issued = ca.issue(name, server=True, sans=args.san)
        print(f"node      {issued.cert}  {issued.key}")
    for name in args.client:
        issued = ca.issue(name, server=False)
        print(f"client    {issued.cert}  {issued.key}")
    return 0
