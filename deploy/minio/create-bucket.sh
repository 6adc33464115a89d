#!/bin/sh
# One-shot (the minio-init service): the lakesync bucket, and an S3 user that may use only that bucket
# (deploy/minio/lakesync-policy.json), so the pipelines never hold MinIO's root credentials.
# Safe to run again: every step is idempotent.
set -eu

mc alias set local "http://minio:9000" "${MINIO_ROOT_USER}" "${MINIO_ROOT_PASSWORD}"
mc mb --ignore-existing local/lakesync
mc admin user add local "${LAKESYNC_S3_ACCESS_KEY}" "${LAKESYNC_S3_SECRET_KEY}"
mc admin policy create local lakesync-delta /opt/lakesync/minio/lakesync-policy.json
mc admin policy attach local lakesync-delta --user "${LAKESYNC_S3_ACCESS_KEY}" \
    || echo "policy lakesync-delta is already attached to ${LAKESYNC_S3_ACCESS_KEY}"
