"""A pyarrow filesystem for a Delta table URI and the pipeline's ``delta.storage_options``.

delta-rs takes object_store's option names (``AWS_ENDPOINT_URL``, ``aws_access_key_id``, ...); the full load's
executors write their Parquet files with pyarrow, which needs the same settings in its own form. Without them
an ``s3://`` root resolves to AWS itself, whatever endpoint the pipeline names.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from lakesync.core.errors import ConfigError


def _option(options: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        for key in (name, f"AWS_{name}"):
            if options.get(key):
                return options[key]
    return None


def arrow_filesystem(uri: str, storage_options: Mapping[str, str] | None = None) -> tuple[pafs.FileSystem, str]:
    """``(filesystem, path inside it)`` for a local path, ``file://`` or ``s3://`` URI."""
    parts = urlsplit(uri)
    if "://" not in uri or parts.scheme == "file":
        return pafs.LocalFileSystem(), os.path.abspath(parts.path if parts.scheme else uri)
    if parts.scheme not in ("s3", "s3a"):
        return pafs.FileSystem.from_uri(uri)
    options = {key.upper(): value for key, value in (storage_options or {}).items()}
    endpoint = _option(options, "ENDPOINT_URL", "ENDPOINT")
    if endpoint and endpoint.startswith("http://") and (_option(options, "ALLOW_HTTP") or "").lower() != "true":
        raise ConfigError(f"delta.storage_options names the plain-HTTP endpoint {endpoint} without allow_http",
                          hint="set AWS_ALLOW_HTTP: 'true' (a local or test endpoint only) or use https")
    scheme: Literal["http", "https"] = "http" if endpoint and endpoint.startswith("http://") else "https"
    filesystem = pafs.S3FileSystem(
        access_key=_option(options, "ACCESS_KEY_ID"), secret_key=_option(options, "SECRET_ACCESS_KEY"),
        session_token=_option(options, "SESSION_TOKEN", "TOKEN"),
        region=_option(options, "REGION", "DEFAULT_REGION") or "us-east-1",
        endpoint_override=urlsplit(endpoint).netloc if endpoint else None,
        scheme=scheme,
    )
    return filesystem, parts.netloc + parts.path
