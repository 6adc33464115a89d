"""Delta table locations as Spark sees them: ``s3://`` becomes Hadoop's ``s3a://``, with S3A settings taken from
the pipeline's ``delta.storage_options`` (the object_store names delta-rs and pyarrow read too).

One ``delta.storage_options`` block configures every reader and writer: ``AWS_ENDPOINT_URL``, ``AWS_REGION``,
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_ALLOW_HTTP``. A custom endpoint
gets path-style access (what MinIO and moto serve). Credentials go into the Hadoop configuration of the
session, never into a log line or an error message.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

_CREDENTIALS = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
_TEMPORARY = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"


def spark_path(uri: str) -> str:
    """The path Spark reads and writes a table at: ``s3://b/p`` -> ``s3a://b/p``; others unchanged."""
    scheme, sep, rest = uri.partition("://")
    return f"s3a://{rest}" if sep and scheme == "s3" else uri


def _option(options: Mapping[str, str], *names: str) -> str | None:
    upper = {key.upper(): value for key, value in options.items()}
    for name in names:
        for key in (name, f"AWS_{name}"):
            if upper.get(key):
                return upper[key]
    return None


def hadoop_s3a_conf(storage_options: Mapping[str, str] | None) -> dict[str, str]:
    """The ``spark.hadoop.fs.s3a.*`` settings for ``storage_options`` (empty when they name no S3 setting)."""
    options = dict(storage_options or {})
    conf: dict[str, str] = {}
    endpoint = _option(options, "ENDPOINT_URL", "ENDPOINT")
    if endpoint:
        conf["fs.s3a.endpoint"] = endpoint
        conf["fs.s3a.path.style.access"] = "true"
        conf["fs.s3a.connection.ssl.enabled"] = str(endpoint.startswith("https://")).lower()
    region = _option(options, "REGION", "DEFAULT_REGION")
    if region:
        conf["fs.s3a.endpoint.region"] = region
    key, secret = _option(options, "ACCESS_KEY_ID"), _option(options, "SECRET_ACCESS_KEY")
    if key and secret:
        conf["fs.s3a.access.key"], conf["fs.s3a.secret.key"] = key, secret
        token = _option(options, "SESSION_TOKEN", "TOKEN")
        conf["fs.s3a.aws.credentials.provider"] = _TEMPORARY if token else _CREDENTIALS
        if token:
            conf["fs.s3a.session.token"] = token
    return {f"spark.hadoop.{name}": value for name, value in conf.items()}


def is_object_store(uri: str) -> bool:
    return urlsplit(uri).scheme in ("s3", "s3a")
