"""The seams are kept: each provider really has what its zope.interface declares."""

from __future__ import annotations

from pathlib import Path

from zope.interface.verify import verifyObject

from security import (
    CertificateAuthenticator,
    ChainAuthenticator,
    IAuthenticator,
    ISecurityAuth,
    SecurityAuth,
    UsersFileAuthenticator,
)
from tests.security.helpers import write_users


def test_security_auth_provides_isecurityauth() -> None:
    assert verifyObject(ISecurityAuth, SecurityAuth("u", "pw", (), "10.0.0.1:1", "core"))
    assert verifyObject(ISecurityAuth, SecurityAuth())


def test_authenticators_provide_iauthenticator(tmp_path: Path) -> None:
    users = UsersFileAuthenticator(write_users(tmp_path / "users.toml", {"u": ("pw", [])}))
    mapping = tmp_path / "certificates.toml"
    mapping.write_text('[[certificate]]\nsubject = "CN=a"\nuser = "a"\n')
    certificates = CertificateAuthenticator(mapping)
    for authenticator in (users, certificates, ChainAuthenticator([certificates, users])):
        assert verifyObject(IAuthenticator, authenticator)
        assert isinstance(authenticator.name, str) and authenticator.name
