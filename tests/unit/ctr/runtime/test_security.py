"""A daemon names, at start-up, a secret that other users can read and a certificate of its
own that has expired or is about to (it used to start without a word)."""

from __future__ import annotations

import datetime
import logging
import os

import pytest

from boundless.certs import make
from ctr.runtime.auth import load_tokens
from ctr.runtime.security import Identity, SecurityConfig, warn_if_expiring, warn_if_exposed


def test_secrets_readable_by_others_are_named(tmp_path, caplog: pytest.LogCaptureFixture):
    paths = make(tmp_path / "certs", ["localhost"], days=365)
    caplog.set_level(logging.WARNING, logger="security")
    assert not warn_if_exposed(str(paths["node_key"]), "private key")  # boundless certs writes 0600
    os.chmod(paths["node_key"], 0o644)
    os.chmod(paths["tokens"], 0o640)
    Identity.of(SecurityConfig(tls_cert=str(paths["node"]), tls_key=str(paths["node_key"])))
    load_tokens(str(paths["tokens"]))
    text = caplog.text
    assert f"private key {paths['node_key']} can be read by other users (mode 644)" in text
    assert f"tokens file {paths['tokens']} can be read by other users (mode 640)" in text


def test_an_expired_or_expiring_certificate_is_named(tmp_path, caplog: pytest.LogCaptureFixture):
    paths = make(tmp_path / "certs", ["localhost"], days=3)
    pem = paths["node"].read_bytes()
    now = datetime.datetime.now(datetime.UTC)
    assert warn_if_expiring(pem, "node.pem", now) is not None and "in 2 days" in str(warn_if_expiring(pem, "node.pem", now))
    assert "expired on" in str(warn_if_expiring(pem, "node.pem", now + datetime.timedelta(days=4)))
    assert warn_if_expiring(make(tmp_path / "long", ["localhost"], days=365)["node"].read_bytes(), "x", now) is None
