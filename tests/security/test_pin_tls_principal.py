"""The TLS principal: the client certificate's subject printed as Java's
``X500Principal.getName()`` (RFC 2253) prints it, which ``ssl.principal.mapping.rules`` and
ACLs then match. A wrong escape names another principal. Each test kills mutants that survived
``nox -s mutation`` (docs/development.md)."""

from __future__ import annotations

from trio_broker.security.tls import subject_dn


def cert(*rdns: tuple[tuple[str, str], ...]) -> dict[str, object]:
    return {"subject": rdns}


def test_rdns_are_printed_last_first_and_multi_valued_ones_joined_with_plus() -> None:
    dn = subject_dn(cert((("countryName", "DE"),), (("organizationName", "Acme"),),
                         (("commonName", "alice"), ("userId", "42"))))
    assert dn == "CN=alice+UID=42,O=Acme,C=DE"


def test_attributes_without_a_short_name_keep_their_own() -> None:
    assert subject_dn(cert((("serialNumber", "7"),), (("commonName", "a"),))) == \
        "CN=a,serialNumber=7"


def test_a_certificate_without_subject_has_an_empty_dn() -> None:
    assert subject_dn({}) == ""


def test_special_characters_and_edge_spaces_are_escaped() -> None:
    def dn(value: str) -> str:
        return subject_dn(cert((("commonName", value),)))

    assert dn('a,b+c"d\\e<f>g;h') == 'CN=a\\,b\\+c\\"d\\\\e\\<f\\>g\\;h'
    assert dn("#admin") == "CN=\\#admin"
    assert dn(" admin") == "CN=\\ admin"
    assert dn("admin ") == "CN=admin\\ "
    assert dn(" ") == "CN=\\ "
    assert dn("a#b c") == "CN=a#b c"
