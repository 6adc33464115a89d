"""The source connections' TLS context of PyMySQL's preferred mode is built once per process."""

from __future__ import annotations

from lakesync.core.mysql_client import MySQLClientConnection


def _unconnected(**options: object) -> MySQLClientConnection:
    return MySQLClientConnection(host="127.0.0.1", port=1, user="u", password="p", defer_connect=True, **options)


def test_connections_without_ssl_options_try_tls_with_one_shared_context():
    first, second = _unconnected(), _unconnected()
    assert first.ssl and second.ssl, "preferred mode: TLS is tried when the server offers it"
    assert not first._ssl_required, "and not required"
    assert first.ctx is second.ctx


def test_connections_with_ssl_options_get_their_own_required_context():
    shared = _unconnected().ctx
    explicit = _unconnected(ssl={"verify_mode": "none"})
    assert explicit._ssl_required
    assert explicit.ctx is not shared and explicit.ctx is not _unconnected(ssl={"verify_mode": "none"}).ctx


def test_disabled_tls_builds_no_context():
    assert not _unconnected(ssl_disabled=True).ssl
