"""`boundless certs`: a local CA, certificates and bearer tokens for a test deployment.

OUT/ gets:
- ca.pem (the CA every process trusts, --tls-ca) and ca-key.pem;
- node.pem, node-key.pem: the daemons' certificate, for serving and for calling each
  other (mutual TLS), valid for --hosts;
- client.pem, client-key.pem: for command-line tools and other clients;
- tokens.yaml ({token: role}, the servers' --accepted-tokens-file) and one <role>.token per role
  (a process's --token-file).
Private keys and tokens are written readable by their owner only.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import secrets
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ctr.runtime.auth import ROLES

DEFAULT_HOSTS = "localhost,127.0.0.1,::1"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("certs"), help="folder to write into (default: certs)")
    parser.add_argument(
        "--hosts",
        default=DEFAULT_HOSTS,
        help=f"DNS names and IP addresses the daemons' certificate is valid for, comma-separated (default: {DEFAULT_HOSTS})",
    )
    parser.add_argument("--days", type=int, default=365, help="validity of every certificate (default: 365)")
    parser.add_argument("--force", action="store_true", help="overwrite a folder that already holds a CA")


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Boundless test deployment"),
            x509.NameAttribute(NameOID.COMMON_NAME, common),
        ]
    )


def _alt_names(hosts: list[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for h in hosts:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            out.append(x509.DNSName(h))
    return out


def _issue(
    common: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    days: int,
    ca: bool = False,
    hosts: list[str] | None = None,
    usages: tuple[x509.ObjectIdentifier, ...] = (),
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # clocks a little behind still accept it
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if ca:
        usage = x509.KeyUsage(False, False, False, False, False, True, True, False, False)  # cert and CRL signing
    else:
        usage = x509.KeyUsage(True, False, False, False, False, False, False, False, False)  # digital signature
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
    builder = builder.add_extension(usage, critical=True)
    if hosts:
        builder = builder.add_extension(x509.SubjectAlternativeName(_alt_names(hosts)), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(path: Path, data: bytes, secret: bool = False) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if secret else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def make(out: Path, hosts: list[str], days: int = 365) -> dict[str, Path]:
    """Writes the CA, the node and client certificates and the tokens; returns their paths."""
    if days < 1:
        raise ValueError(f"--days {days}: must be at least 1")
    if not hosts:
        raise ValueError("--hosts: give at least one name or address")
    out.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca = _issue("Boundless test CA", ca_key, _name("Boundless test CA"), ca_key, days, ca=True)
    paths = {"ca": out / "ca.pem", "ca_key": out / "ca-key.pem"}
    _write(paths["ca"], ca.public_bytes(serialization.Encoding.PEM))
    _write(paths["ca_key"], _pem_key(ca_key), secret=True)
    both = (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH)
    for name, common, usages, alt in (
        ("node", "boundless node", both, hosts),
        ("client", "boundless client", (ExtendedKeyUsageOID.CLIENT_AUTH,), None),
    ):
        key = _key()
        cert = _issue(common, key, ca.subject, ca_key, days, hosts=alt, usages=usages)
        paths[name], paths[f"{name}_key"] = out / f"{name}.pem", out / f"{name}-key.pem"
        _write(paths[name], cert.public_bytes(serialization.Encoding.PEM))
        _write(paths[f"{name}_key"], _pem_key(key), secret=True)
    tokens = {role: secrets.token_urlsafe(32) for role in ROLES}
    paths["tokens"] = out / "tokens.yaml"
    _write(paths["tokens"], "".join(f"'{tok}': {role}\n" for role, tok in tokens.items()).encode(), secret=True)
    for role, tok in tokens.items():
        paths[f"{role}_token"] = out / f"{role}.token"
        _write(paths[f"{role}_token"], (tok + "\n").encode(), secret=True)
    return paths


def run(args: argparse.Namespace) -> int:
    if (args.out / "ca.pem").exists() and not args.force:
        raise ValueError(f"{args.out / 'ca.pem'} exists: pass --force to make a new CA (every certificate changes)")
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
    paths = make(args.out, hosts, args.days)
    print(f"wrote a CA, node and client certificates (valid {args.days} days for {', '.join(hosts)}) and tokens to {args.out}")
    print(f"  servers: --tls-cert {paths['node']} --tls-key {paths['node_key']} --tls-ca {paths['ca']} --tls-client-auth")
    print(f"           --accepted-tokens-file {paths['tokens']}")
    print(f"  callers: --token-file {args.out}/<role>.token  (roles: {', '.join(ROLES)})")
    print(
        f"  tools:   BOUNDLESS_TLS_CA={paths['ca']} BOUNDLESS_TLS_CERT={paths['client']} BOUNDLESS_TLS_KEY={paths['client_key']}"
    )
    print(f"           BOUNDLESS_TOKEN_FILE={paths['admin_token']}")
    return 0
