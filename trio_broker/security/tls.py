"""TLS for SSL and SASL_SSL listeners: an ``ssl.SSLContext`` built from Kafka's ``ssl.*`` keys,
and the principal of a client certificate (``ssl.principal.mapping.rules``).

Only PEM keystores and truststores are implemented; JKS and PKCS12 are refused at start-up with
an error naming the key. No Trio import.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from collections.abc import Callable
from typing import Any

import attrs

from ..config import BrokerConfig, ConfigError

#: Kafka's ``ssl.enabled.protocols`` names → ``ssl.TLSVersion``.
_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3,
              "TLSv1.1": ssl.TLSVersion.TLSv1_1, "TLSv1": ssl.TLSVersion.TLSv1}


def build_ssl_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The server-side context of one listener; raises :class:`ConfigError` naming the key."""

    def get(key: str) -> Any:
        return config.security_setting(listener, key)

    def key_name(key: str) -> str:
        given = key in config.listener_security.get(listener.lower(), {})
        return f"listener.name.{listener.lower()}.{key}" if given else key

    for key in ("ssl.keystore.type", "ssl.truststore.type"):
        if get(key) != "PEM":
            raise ConfigError(key_name(key), get(key),
                              "only PEM is implemented (convert with openssl, docs/security.md)")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _load_keystore(context, get, key_name)
    _load_truststore(context, get, key_name)
    client_auth = get("ssl.client.auth")
    context.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                           "required": ssl.CERT_REQUIRED}[client_auth]
    if client_auth != "none" and not (get("ssl.truststore.location")
                                      or get("ssl.truststore.certificates")):
        # Kafka would fall back to the JVM's default CAs; client certificates from a public CA
        # are not a sensible default for a broker, so the truststore is required.
        raise ConfigError(key_name("ssl.client.auth"), client_auth,
                          "requested or required needs ssl.truststore.location or "
                          "ssl.truststore.certificates")
    versions = [v.strip() for v in get("ssl.enabled.protocols").split(",") if v.strip()]
    unknown = [v for v in versions if v not in _PROTOCOLS]
    if not versions or unknown:
        raise ConfigError(key_name("ssl.enabled.protocols"), get("ssl.enabled.protocols"),
                          "a list of " + ", ".join(_PROTOCOLS))
    chosen = sorted(_PROTOCOLS[v] for v in versions)
    context.minimum_version, context.maximum_version = chosen[0], chosen[-1]
    suites = [s.strip() for s in get("ssl.cipher.suites").split(",") if s.strip()]
    if suites:
        try:
            context.set_ciphers(":".join(_openssl_cipher(s) for s in suites))
        except ssl.SSLError:
            raise ConfigError(key_name("ssl.cipher.suites"), get("ssl.cipher.suites"),
                              "no cipher suite in the list is supported") from None
    if get("ssl.endpoint.identification.algorithm") not in ("https", ""):
        raise ConfigError(key_name("ssl.endpoint.identification.algorithm"),
                          get("ssl.endpoint.identification.algorithm"), "must be https or empty")
    PrincipalMapper.parse(get("ssl.principal.mapping.rules"),
                          key_name("ssl.principal.mapping.rules"))
    return context


def _load_keystore(context: ssl.SSLContext, get: Callable[[str], Any],
                   key_name: Callable[[str], str]) -> None:
    location = get("ssl.keystore.location")
    chain, key = get("ssl.keystore.certificate.chain"), get("ssl.keystore.key")
    password = get("ssl.key.password")
    if location and (chain or key):
        raise ConfigError(key_name("ssl.keystore.location"), location,
                          "give either the keystore file or ssl.keystore.certificate.chain and "
                          "ssl.keystore.key, not both")
    try:
        if location:
            context.load_cert_chain(location, password=password)
        elif chain and key:
            _load_inline_chain(context, chain, key, password)
        else:
            raise ConfigError(key_name("ssl.keystore.location"), None,
                              "an SSL listener needs a keystore: ssl.keystore.location, or "
                              "ssl.keystore.certificate.chain with ssl.keystore.key")
    except (OSError, ssl.SSLError) as exc:
        name = "ssl.keystore.location" if location else "ssl.keystore.certificate.chain"
        raise ConfigError(key_name(name), location or "(inline PEM)",
                          f"cannot load the certificate chain and key ({exc}); a wrong "
                          "ssl.key.password fails here too") from None


def _load_inline_chain(context: ssl.SSLContext, chain: str, key: str,
                       password: str | None) -> None:
    """``load_cert_chain`` reads files only: the inline PEM goes through a private temporary
    file that is removed at once."""
    fd, path = tempfile.mkstemp(suffix=".pem")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(_pem_text(key) + "\n" + _pem_text(chain) + "\n")
        context.load_cert_chain(path, password=password)
    finally:
        os.unlink(path)


_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)


def _pem_text(value: str) -> str:
    """Kafka allows PEM on one line in a properties file (newlines as spaces): each block is
    rebuilt with its base64 body in 64-character lines."""
    blocks = []
    for match in _PEM_BLOCK.finditer(value):
        body = "".join(match.group(2).split())
        lines = [body[i:i + 64] for i in range(0, len(body), 64)]
        blocks.append("\n".join([f"-----BEGIN {match.group(1)}-----", *lines,
                                  f"-----END {match.group(1)}-----"]))
    return "\n".join(blocks) + "\n" if blocks else value


def _load_truststore(context: ssl.SSLContext, get: Callable[[str], Any],
                     key_name: Callable[[str], str]) -> None:
    location, inline = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    try:
        if location:
            context.load_verify_locations(cafile=location)
        elif inline:
            context.load_verify_locations(cadata=_pem_text(inline))
    except (OSError, ssl.SSLError) as exc:
        name = "ssl.truststore.location" if location else "ssl.truststore.certificates"
        raise ConfigError(key_name(name), location or "(inline PEM)",
                          f"cannot load the trusted certificates ({exc})") from None


def _openssl_cipher(name: str) -> str:
    """Kafka takes IANA (JSSE) names like TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256; OpenSSL's own
    names pass through."""
    return _IANA_TO_OPENSSL.get(name, name)


_IANA_TO_OPENSSL = {
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
}

# ------------------------------------------------------------------ certificate principals
#: getpeercert() attribute names → RFC 2253 short names (Java's X500Principal.getName()).
_SHORT = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
          "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
          "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID"}


def subject_dn(cert: dict[str, Any]) -> str:
    """The subject as Java's ``X500Principal.getName()`` (RFC 2253) prints it: the last RDN
    first, ``,`` between RDNs, ``+`` inside a multi-valued one, special characters escaped."""
    rdns = []
    for rdn in reversed(cert.get("subject", ())):
        rdns.append("+".join(f"{_SHORT.get(name, name)}={_escape(value)}" for name, value in rdn))
    return ",".join(rdns)


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


_RULE_RE = re.compile(r"\s*((DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?))\s*(,|$)")


@attrs.frozen
class PrincipalMapper:
    """Kafka's SslPrincipalMapper: the first rule whose pattern matches the whole DN wins."""

    rules: tuple[tuple[str, re.Pattern[str] | None, str, str], ...]

    @classmethod
    def parse(cls, text: str, key: str = "ssl.principal.mapping.rules") -> PrincipalMapper:
        rules: list[tuple[str, re.Pattern[str] | None, str, str]] = []
        position = 0
        text = text.strip()
        while position < len(text):
            match = _RULE_RE.match(text, position)
            if match is None or match.end() == position:
                raise ConfigError(key, text, "rules are DEFAULT or RULE:pattern/replacement/[LU], "
                                             "separated by commas")
            if match.group(2):
                rules.append(("DEFAULT", None, "", ""))
            else:
                try:
                    pattern = re.compile(match.group(3))
                except re.error as exc:
                    raise ConfigError(key, text, f"invalid pattern: {exc}") from None
                # Java's $1 is Python's \g<1>
                replacement = re.sub(r"\$(\d+)", r"\\g<\1>", match.group(5))
                rules.append(("RULE", pattern, replacement, match.group(7)))
            position = match.end()
        return cls(tuple(rules) or (("DEFAULT", None, "", ""),))

    def name(self, dn: str) -> str:
        for kind, pattern, replacement, case in self.rules:
            if kind == "DEFAULT":
                return dn
            assert pattern is not None
            if pattern.fullmatch(dn):
                result = pattern.sub(replacement, dn, count=1)
                return result.lower() if case == "L" else result.upper() if case == "U" else result
        raise ValueError(f"No rules apply to {dn}, rules {self.rules}")
