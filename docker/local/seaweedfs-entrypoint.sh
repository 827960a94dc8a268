#!/usr/bin/env bash
# Entry point of docker/local/seaweedfs.Dockerfile: `weed server` (master, volume, filer, S3)
# with data in $1 (default /data), S3 on :9000 with the keys $MINIO_ROOT_USER /
# $MINIO_ROOT_PASSWORD, and the filer's browser UI on :9001 (where MinIO has its console).
set -euo pipefail
data=${1:-/data}
: "${MINIO_ROOT_USER:?set MINIO_ROOT_USER}" "${MINIO_ROOT_PASSWORD:?set MINIO_ROOT_PASSWORD}"
mkdir -p "$data" /etc/seaweedfs
cat >/etc/seaweedfs/s3.json <<JSON
{"identities": [{"name": "root", "credentials": [{"accessKey": "${MINIO_ROOT_USER}",
  "secretKey": "${MINIO_ROOT_PASSWORD}"}], "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}
JSON
exec weed server -dir="$data" -master.volumeSizeLimitMB=256 -volume.max=0 \
  -filer -filer.port=9001 -s3 -s3.port=9000 -s3.config=/etc/seaweedfs/s3.json
