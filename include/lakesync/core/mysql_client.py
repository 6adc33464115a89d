"""PyMySQL connections that share one TLS context for PyMySQL's preferred mode, built once per process.

A connection given no ``ssl`` options tries TLS anyway (PyMySQL 1.2's "preferred" mode: TLS when the server
offers it, the certificate not verified) and builds a fresh default SSL context for that every time, loading
the system's CA store: about 45 ms of CPU per connection, for a context that verifies nothing. lakesync opens
a connection per table it loads, per check and per relay restart, so the cost adds up; an ``SSLContext`` is
safe to share, so the preferred-mode context is built once and reused. Connections with ``ssl`` options (the
pipeline's ``source.ssl``) still get their own context, built by PyMySQL from those options.
"""

from __future__ import annotations

import ssl
import threading
from typing import Any

import pymysql

_shared_lock = threading.Lock()
_shared_context: ssl.SSLContext | None = None


class MySQLClientConnection(pymysql.connections.Connection):
    """``pymysql.connections.Connection`` with the preferred-mode TLS context shared (see the module)."""

    def _create_ssl_ctx(self, sslp: Any) -> ssl.SSLContext:
        if sslp != {}:  # the caller's options (or context); PyMySQL passes {} for its preferred mode only
            return super()._create_ssl_ctx(sslp)  # type: ignore[misc]  # not in the stubs: PyMySQL's private method
        global _shared_context
        with _shared_lock:
            if _shared_context is None:
                _shared_context = super()._create_ssl_ctx(sslp)  # type: ignore[misc]
            return _shared_context


def connect_mysql(**options: Any) -> pymysql.connections.Connection:
    """``pymysql.connect(**options)`` through :class:`MySQLClientConnection` (also the binlog reader's
    ``pymysql_wrapper``)."""
    return MySQLClientConnection(**options)
