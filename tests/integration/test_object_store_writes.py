"""The full load's Parquet writes reach the object store the pipeline names (an S3 endpoint, here moto)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from lakesync_devkit.dev.processes import free_port

from lakesync.core.errors import ConfigError
from lakesync.core.object_store import arrow_filesystem
from lakesync.full_load.parquet_writer import write_part

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def s3():
    import boto3
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    options = {"AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": "test",
               "AWS_SECRET_ACCESS_KEY": "secret", "AWS_REGION": "us-east-1"}
    client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="secret",
                          region_name="us-east-1")
    client.create_bucket(Bucket="lake")
    yield options, client
    server.stop()


def test_data_file_of_an_s3_table_is_written_to_the_configured_endpoint(s3):
    options, client = s3
    schema = pa.schema([("id", pa.int64()), ("_lakesync_pos", pa.string())])
    part = pa.table({"id": [1, 2], "_lakesync_pos": ["a", "b"]}, schema=schema)
    name, size, rows, _ = write_part("s3://lake/demo/accounts", schema, [part], stats_columns=["id"],
                                     storage_options=options)
    found = client.head_object(Bucket="lake", Key=f"demo/accounts/{name}")
    assert (rows, size) == (2, found["ContentLength"])


def test_plain_http_endpoint_without_allow_http_is_a_config_error():
    with pytest.raises(ConfigError, match="allow_http"):
        arrow_filesystem("s3://lake/t", {"AWS_ENDPOINT_URL": "http://127.0.0.1:9"})


def test_local_paths_stay_local(tmp_path):
    filesystem, path = arrow_filesystem(str(tmp_path / "t"))
    assert filesystem.type_name == "local" and path == str(tmp_path / "t")
