"""``txbridge certs``: a usable development CA, node and client certificates."""

from __future__ import annotations

import datetime
import stat

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from bridge.ctl.main import main
from transport.certs import DevelopmentCA, make_ca_certificate, make_leaf_certificate


def test_creates_a_ca_then_node_and_client_certificates(tmp_path, capsys):
    assert main(["certs", "--dir", str(tmp_path), "--node", "a", "--client", "alice"]) == 0
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.pem").read_bytes())
    node = x509.load_pem_x509_certificate((tmp_path / "a.pem").read_bytes())
    client = x509.load_pem_x509_certificate((tmp_path / "alice.pem").read_bytes())

    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for leaf in (node, client):
        leaf.verify_directly_issued_by(ca)
    sans = node.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in sans.get_values_for_type(x509.DNSName)
    usages = node.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usages and ExtendedKeyUsageOID.CLIENT_AUTH in usages
    assert client.subject.rfc4514_string().startswith("CN=alice")
    for key in ("ca.key", "a.key", "alice.key"):
        assert stat.S_IMODE((tmp_path / key).stat().st_mode) == 0o600
    assert "client" in capsys.readouterr().out


def test_reuses_the_existing_ca(tmp_path):
    main(["certs", "--dir", str(tmp_path)])
    first = (tmp_path / "ca.pem").read_bytes()
    main(["certs", "--dir", str(tmp_path), "--node", "b", "--san", "node-b.example"])
    assert (tmp_path / "ca.pem").read_bytes() == first
    node = x509.load_pem_x509_certificate((tmp_path / "b.pem").read_bytes())
    sans = node.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["node-b.example"]


@pytest.mark.parametrize("name", ["../escape", "ca", "a b"])
def test_refuses_names_that_are_not_plain_file_names(tmp_path, capsys, name):
    with pytest.raises(SystemExit):
        main(["certs", "--dir", str(tmp_path), "--client", name])
    assert "use letters, digits" in capsys.readouterr().err


def test_an_intermediate_ca_is_issued_by_its_root_and_the_development_ca_stays_a_root(tmp_path):
    root, root_key = make_ca_certificate("root", path_length=1)
    intermediate, intermediate_key = make_ca_certificate("intermediate", issuer=(root, root_key))
    leaf, _ = make_leaf_certificate(intermediate, intermediate_key, "leaf", server=False)

    intermediate.verify_directly_issued_by(root)
    leaf.verify_directly_issued_by(intermediate)
    assert intermediate.issuer == root.subject
    constraints = intermediate.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca and constraints.path_length == 0
    authority = intermediate.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier)
    assert authority.value.key_identifier == (
        root.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest
    )

    ca = DevelopmentCA.open_or_create(tmp_path).certificate
    assert ca.issuer == ca.subject
    ca.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.path_length == 0


def test_a_leaf_can_be_issued_with_a_validity_in_the_past(tmp_path):
    ca, ca_key = make_ca_certificate("root")
    start = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
    leaf, _ = make_leaf_certificate(ca, ca_key, "old", server=False, not_before=start, days=2)
    assert leaf.not_valid_before_utc == start
    assert leaf.not_valid_after_utc == start + datetime.timedelta(days=2)
