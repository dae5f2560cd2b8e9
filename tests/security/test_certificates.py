"""Certificate login (without a socket: see test_tls_login.py for real TLS) and role mapping."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from security import (
    AuthenticationFailed,
    AuthMethod,
    CertificateAuthenticator,
    ConfigError,
    Identity,
    RoleMapper,
    RoleRule,
    SecurityAuth,
    SecurityStore,
    load_security,
)
from security.audit import AUDIT_LOGGER_NAME
from security.certificates import certificate_sans, load_certificate_map, normalize_dn
from tests.security.certs import Issued, issue, make_ca
from tests.security.helpers import FakeClock, write_users


@pytest.fixture(scope="module")
def ca() -> Issued:
    return make_ca()


@pytest.fixture(scope="module")
def app(ca: Issued) -> Issued:
    return issue(ca, "app", organization="Example")


@pytest.fixture(scope="module")
def bridge_b(ca: Issued) -> Issued:
    return issue(ca, "bridge-b", dns=("Bridge-B.example.com",), emails=("ops@Example.com",))


@pytest.fixture(scope="module")
def stranger(ca: Issued) -> Issued:
    return issue(ca, "stranger", dns=("stranger.example.com",))


MAPPING = """
[[certificate]]
subject = "CN = app, O = Example"
user = "app-user"
roles = ["producers"]

[[certificate]]
san = "DNS:bridge-b.example.com"
user = "bridge-b"
"""


@pytest.fixture
def mapping(tmp_path: Path) -> Path:
    path = tmp_path / "certificates.toml"
    path.write_text(MAPPING)
    return path


def auth(leaf: Issued | None, user: str | None = None, password: str | None = None) -> SecurityAuth:
    chain = (leaf.certificate,) if leaf is not None else ()
    return SecurityAuth(user, password, chain, "192.0.2.5:7000", "core")


def test_subject_dn_maps_to_user(mapping: Path, app: Issued) -> None:
    identity = CertificateAuthenticator(mapping).authenticate(auth(app))
    assert identity == Identity(
        "app-user",
        frozenset({"producers"}),
        AuthMethod.CERTIFICATE,
        frozenset({"CN=app,O=Example"}),
    )


def test_san_maps_to_user(mapping: Path, bridge_b: Issued) -> None:
    assert "dns:bridge-b.example.com" in certificate_sans(bridge_b.certificate)
    assert "email:ops@example.com" in certificate_sans(bridge_b.certificate)
    identity = CertificateAuthenticator(mapping).authenticate(auth(bridge_b))
    assert identity is not None
    assert (identity.user, identity.roles) == ("bridge-b", frozenset())


def test_unmapped_or_absent_certificate_is_not_vouched_for(mapping: Path, stranger: Issued) -> None:
    authenticator = CertificateAuthenticator(mapping)
    assert authenticator.authenticate(auth(stranger)) is None
    assert authenticator.authenticate(auth(None, "app-user", "pw")) is None


def test_certificate_of_another_user_than_named_declines(mapping: Path, app: Issued) -> None:
    authenticator = CertificateAuthenticator(mapping)
    assert authenticator.authenticate(auth(app, user="someone-else")) is None
    assert authenticator.authenticate(auth(app, user="app-user")) is not None


def test_chain_certificate_then_password(
    tmp_path: Path, mapping: Path, app: Issued, stranger: Issued, caplog: pytest.LogCaptureFixture
) -> None:
    users = write_users(tmp_path / "users.toml", {"carol": ("carol-pw", ["consumers"])})
    table = {"users-file": str(users), "certificate-users-file": str(mapping)}
    store = SecurityStore(load_security(table, str(tmp_path / "node.toml")), FakeClock())
    assert store.authenticate(auth(app)).method is AuthMethod.CERTIFICATE
    # An unmapped certificate with a good password logs in by password...
    carol = store.authenticate(auth(stranger, "carol", "carol-pw"))
    assert (carol.user, carol.method) == ("carol", AuthMethod.PASSWORD)
    # ... but alone it is refused, and the audit line names its subject.
    caplog.set_level(logging.WARNING, logger=AUDIT_LOGGER_NAME)
    with pytest.raises(AuthenticationFailed):
        store.authenticate(auth(stranger))
    assert 'certificate="CN=stranger,O=txbridge tests"' in caplog.records[-1].getMessage()


def test_role_mapping_is_additive(tmp_path: Path, mapping: Path, app: Issued) -> None:
    users = write_users(tmp_path / "users.toml", {"carol": ("pw", ["ops"])})
    table = {
        "users-file": str(users),
        "certificate-users-file": str(mapping),
        "role-mapping": [
            {"from": "dn:cn=app,o=Example", "to": "auditors"},
            {"from": "role:ops", "to": "admins"},
            {"from": "user:carol", "to": "carols"},
            {"from": "role:admins", "to": "not-transitive"},
        ],
    }
    store = SecurityStore(load_security(table, str(tmp_path / "node.toml")), FakeClock())
    assert store.authenticate(auth(app)).roles == {"producers", "auditors"}
    assert store.authenticate(auth(None, "carol", "pw")).roles == {"ops", "admins", "carols"}


def test_role_mapping_kinds_do_not_mix(tmp_path: Path) -> None:
    # A user called "ops" is not the group "ops", and a role named like a user is not
    # that user: each rule says which it means.
    users = write_users(
        tmp_path / "users.toml",
        {"ops": ("pw", []), "carol": ("pw", ["ops"]), "dave": ("pw", ["carol"])},
    )
    table = {
        "users-file": str(users),
        "role-mapping": [
            {"from": "role:ops", "to": "admins"},
            {"from": "user:carol", "to": "carols"},
        ],
    }
    store = SecurityStore(load_security(table, str(tmp_path / "node.toml")), FakeClock())
    assert store.authenticate(auth(None, "ops", "pw")).roles == frozenset()
    assert store.authenticate(auth(None, "carol", "pw")).roles == {"ops", "admins", "carols"}
    assert store.authenticate(auth(None, "dave", "pw")).roles == {"carol"}


def test_role_mapper_without_rules_returns_the_same_identity() -> None:
    identity = Identity("u", frozenset({"a"}), AuthMethod.PASSWORD)
    assert RoleMapper().apply(identity) is identity
    assert RoleMapper([RoleRule.parse("role:a", "a")]).apply(identity) is identity


def test_mapping_file_reloaded(tmp_path: Path, mapping: Path, stranger: Issued) -> None:
    authenticator = CertificateAuthenticator(mapping)
    assert authenticator.authenticate(auth(stranger)) is None
    mapping.write_text(
        MAPPING + '\n[[certificate]]\nsubject = "CN=stranger,O=txbridge tests"\nuser = "s"\n'
    )
    authenticator.reload()
    assert authenticator.authenticate(auth(stranger)) is not None


@pytest.mark.parametrize(
    ("text", "key", "expected"),
    [
        ('[[certificate]]\nuser = "u"\n', "certificate[0]", "exactly one of subject"),
        (
            '[[certificate]]\nsubject = "CN=a"\nsan = "dns:a"\nuser = "u"\n',
            "certificate[0]",
            "exactly one of subject",
        ),
        ('[[certificate]]\nsubject = "CN=a"\n', "certificate[0].user", "missing"),
        (
            '[[certificate]]\nsubject = "not a dn"\nuser = "u"\n',
            "certificate[0].subject",
            "expected an RFC 4514 DN",
        ),
        (
            '[[certificate]]\nsan = "host.example.com"\nuser = "u"\n',
            "certificate[0].san",
            "expected dns:... email:... uri:... ip:...",
        ),
        ('[[certificate]]\nsan = "ip:300.1.1.1"\nuser = "u"\n', "certificate[0].san", "300.1.1.1"),
        (
            '[[certificate]]\nsubject = "CN=a"\nuser = "u"\nroles = "r"\n',
            "certificate[0].roles",
            "expected a list of role names",
        ),
        (
            '[[certificate]]\nsubject = "CN=a"\nuser = "u"\n[[certificate]]\nsubject = "cn=a"\n'
            'user = "v"\n',
            "certificate[1].subject",
            "'CN=a' is mapped twice",
        ),
        (
            '[[certificate]]\nsubject = "CN=a"\nuser = "u"\nrole = []\n',
            "certificate[0].role",
            "did you mean 'roles'",
        ),
        ('[certificate]\nsubject = "CN=a"\n', "certificate", "expected an array of tables"),
    ],
)
def test_bad_mapping_file(tmp_path: Path, text: str, key: str, expected: str) -> None:
    path = tmp_path / "certificates.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_certificate_map(path)
    assert (error.value.source, error.value.key) == (str(path), key)
    assert expected in error.value.expected


def test_dn_spelling_is_normalized() -> None:
    assert normalize_dn(" cn = app , O=Example ") == "CN=app,O=Example"
    assert normalize_dn("emailAddress=a@b.example,CN=x") == "1.2.840.113549.1.9.1=a@b.example,CN=x"
    with pytest.raises(ValueError):
        normalize_dn("nonsense")
