"""Transport security and the caller's identity: TLS (optionally mutual) on every gRPC
endpoint, and the bearer token a process presents to the others.

Every daemon config inherits `SecurityConfig`. A process installs its identity once
(`install`) and every channel it opens (`open_channel`) uses it; command-line tools with no
config take it from the environment (BOUNDLESS_TLS_CA, BOUNDLESS_TLS_CERT, BOUNDLESS_TLS_KEY,
BOUNDLESS_TOKEN or BOUNDLESS_TOKEN_FILE). gRPC loads only when a channel or server is made.
"""

from __future__ import annotations

import datetime
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctr.runtime.extras import hint

if TYPE_CHECKING:
    import grpc


class SecurityError(ValueError):
    """A certificate, key or token file that is missing or unreadable, named."""


@dataclass(frozen=True)
class SecurityConfig:
    """The fields every daemon config takes for TLS and tokens."""

    tls_cert: str | None = field(default=None, metadata={"help": "PEM certificate this process presents (server and client)"})
    tls_key: str | None = field(default=None, metadata={"help": "PEM private key of --tls-cert"})
    tls_ca: str | None = field(
        default=None,
        metadata={"help": "PEM CA bundle: verifies the servers this process calls, and clients under --tls-client-auth"},
    )
    tls_client_auth: bool = field(
        default=False, metadata={"help": "mutual TLS: refuse clients without a certificate of --tls-ca"}
    )
    accepted_tokens_file: str | None = field(
        default=None,
        metadata={"help": "YAML {token: role} this server accepts (roles: predict, trainer, admin); none: no tokens asked"},
    )
    token_file: str | None = field(default=None, metadata={"help": "file holding the bearer token this process presents"})


EXPIRY_WARNING_DAYS = 14  # a certificate this close to its end is named at start-up
log = logging.getLogger("security")


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise SecurityError(f"{what} {path}: {e.strerror or e}") from None


def warn_if_exposed(path: str, what: str) -> bool:
    """Warns when a secret (a private key, a token) can be read by other users; True then."""
    try:
        mode = Path(path).stat().st_mode
    except OSError:
        return False
    if mode & 0o077:
        log.warning("%s %s can be read by other users (mode %o): chmod 600 %s", what, path, mode & 0o777, path)
        return True
    return False


def warn_if_expiring(pem: bytes, path: str, now: datetime.datetime | None = None) -> str | None:
    """Warns when this process's own certificate has expired or expires within
    EXPIRY_WARNING_DAYS (peers would refuse it); returns the warning."""
    try:
        from cryptography import x509
    except ModuleNotFoundError:
        log.warning("certificate %s: expiry not checked: %s", path, hint("cryptography"))
        return None

    try:
        cert = x509.load_pem_x509_certificate(pem)
    except ValueError as e:
        raise SecurityError(f"certificate {path}: not a PEM certificate ({e})") from None
    now = now or datetime.datetime.now(datetime.UTC)
    end = cert.not_valid_after_utc
    if end <= now:
        msg = f"certificate {path} expired on {end:%Y-%m-%d %H:%M} UTC: peers will refuse it; renew it (boundless certs)"
    elif end - now <= datetime.timedelta(days=EXPIRY_WARNING_DAYS):
        msg = f"certificate {path} expires on {end:%Y-%m-%d %H:%M} UTC, in {(end - now).days} days: renew it soon"
    else:
        return None
    log.warning("%s", msg)
    return msg


@dataclass(frozen=True)
class Identity:
    """What a process presents and trusts: PEM bytes (None: not configured) and its token."""

    cert: bytes | None = None
    key: bytes | None = None
    ca: bytes | None = None
    client_auth: bool = False
    token: str | None = None

    @property
    def tls(self) -> bool:
        return self.ca is not None or self.cert is not None

    @classmethod
    def of(cls, conf: SecurityConfig) -> Identity:
        if (conf.tls_cert is None) != (conf.tls_key is None):
            raise SecurityError("tls_cert and tls_key go together: give both or neither")
        if conf.tls_client_auth and (conf.tls_ca is None or conf.tls_cert is None):
            raise SecurityError("tls_client_auth needs tls_ca (to check clients) and tls_cert/tls_key")
        token = _read(conf.token_file, "token file").decode().strip() if conf.token_file else None
        if conf.token_file and not token:
            raise SecurityError(f"token file {conf.token_file}: empty")
        if conf.token_file:
            warn_if_exposed(conf.token_file, "token file")
        if conf.tls_key:
            warn_if_exposed(conf.tls_key, "private key")
        cert = _read(conf.tls_cert, "certificate") if conf.tls_cert else None
        if cert is not None and conf.tls_cert:
            warn_if_expiring(cert, conf.tls_cert)
        return cls(
            cert,
            _read(conf.tls_key, "private key") if conf.tls_key else None,
            _read(conf.tls_ca, "CA bundle") if conf.tls_ca else None,
            conf.tls_client_auth,
            token,
        )

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Identity:
        env = os.environ if environ is None else environ
        conf = SecurityConfig(
            tls_cert=env.get("BOUNDLESS_TLS_CERT") or None,
            tls_key=env.get("BOUNDLESS_TLS_KEY") or None,
            tls_ca=env.get("BOUNDLESS_TLS_CA") or None,
            token_file=env.get("BOUNDLESS_TOKEN_FILE") or None,
        )
        found = cls.of(conf)
        token = env.get("BOUNDLESS_TOKEN") or found.token
        return cls(found.cert, found.key, found.ca, False, token)

    def server_credentials(self) -> grpc.ServerCredentials | None:
        """None without a certificate (an insecure port)."""
        import grpc

        if self.cert is None or self.key is None:
            return None
        return grpc.ssl_server_credentials(
            [(self.key, self.cert)], root_certificates=self.ca if self.client_auth else None, require_client_auth=self.client_auth
        )


_installed: Identity | None = None


def install(identity: Identity) -> None:
    """This process's identity for every channel it opens from now on."""
    global _installed
    _installed = identity


def current() -> Identity:
    """The installed identity, or the environment's."""
    global _installed
    if _installed is None:
        _installed = Identity.from_env()
    return _installed


def open_channel(address: str, options: Sequence[tuple[str, Any]] = (), identity: Identity | None = None) -> grpc.Channel:
    """A channel to `address`: TLS when the identity trusts a CA (mutual when it holds a
    certificate), carrying its bearer token on every call when it has one."""
    import grpc

    from ctr.runtime.auth import TokenCallInterceptor

    me = identity or current()
    if me.ca is not None:
        creds = grpc.ssl_channel_credentials(root_certificates=me.ca, private_key=me.key, certificate_chain=me.cert)
        channel = grpc.secure_channel(address, creds, options=list(options))
    else:
        channel = grpc.insecure_channel(address, options=list(options))
    if me.token:
        return grpc.intercept_channel(channel, TokenCallInterceptor(me.token))
    return channel
