"""An S3-compatible object store on loopback: moto's server (PyPI ``moto[server]``), state in memory.

It honours conditional writes (``PutObject`` with ``If-None-Match: *`` answers 412 when the key exists),
which is what delta-rs 1.x relies on to make concurrent commits to one table safe on S3 without a lock
table. A restart loses every object, like the embedded broker loses its topics.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import ClassVar

from lakesync_devkit.dev.processes import (
    LocalServer,
    ensure_port_free,
    port_is_open,
    spawn,
    stop_pid,
    wait_until,
)

REGION = "us-east-1"


@dataclass
class ObjectStore(LocalServer):
    access_key: str = ""
    secret_key: str = ""
    name: ClassVar[str] = "object_store"

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, *, timeout: float = 60.0) -> None:
        if self.is_running():
            return
        ensure_port_free(self.host, self.port, "the object store")
        self.home.mkdir(parents=True, exist_ok=True)
        pid = spawn([sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(self.port)],
                    log_file=self.log_file)
        self.pid_file.write_text(str(pid))
        wait_until(lambda: port_is_open(self.host, self.port), timeout=timeout, what="the object store",
                   log_file=self.log_file)

    def stop(self) -> None:
        stop_pid(self.pid())
        self.pid_file.unlink(missing_ok=True)

    def ensure_bucket(self, bucket: str) -> None:
        import boto3

        client = boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
                              aws_secret_access_key=self.secret_key, region_name=REGION)
        if bucket not in {b["Name"] for b in client.list_buckets().get("Buckets", [])}:
            client.create_bucket(Bucket=bucket)
