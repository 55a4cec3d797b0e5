"""The s3fs options of an s3:// location, from the config's `storage:` section (StorageConfig):
endpoint, region, profile name, connection pool, retries, timeouts and upload checksums.
Credentials are never among them: s3fs takes those from the usual AWS environment.
"""

from __future__ import annotations

from typing import Any


def storage_options(uri: str, options: Any | None) -> dict[str, Any]:
    """s3fs keyword arguments from a StorageConfig (credentials stay in the environment).

    Every PUT and multipart part carries the SHA-256 of its bytes (`upload_checksum`, the default
    also without a config), which the store checks before it accepts them: a body corrupted on
    its way is refused (BadDigest), not stored. s3fs passes `s3_additional_kwargs` to each call
    that takes the parameter (PutObject, UploadPart, CreateMultipartUpload, DeleteObjects...)
    and carries each part's ChecksumSHA256 into CompleteMultipartUpload. "none" (a store that
    rejects checksum headers) also stops botocore's own default CRC32 (when_required)."""
    if not uri.startswith("s3://"):
        return {}
    checksum = getattr(options, "upload_checksum", "SHA256")
    upload = {"s3_additional_kwargs": {"ChecksumAlgorithm": checksum}} if checksum != "none" else {}
    if options is None:
        return upload
    kwargs: dict[str, Any] = {
        **upload,
        "config_kwargs": {
            "max_pool_connections": options.max_pool_connections,
            "retries": {"max_attempts": options.retries, "mode": "standard"},
            "read_timeout": options.read_timeout,
            "connect_timeout": options.connect_timeout,
        }
    }
    if checksum == "none":
        kwargs["config_kwargs"]["request_checksum_calculation"] = "when_required"
    client: dict[str, Any] = {}
    if options.endpoint_url:
        client["endpoint_url"] = options.endpoint_url
    if options.region:
        client["region_name"] = options.region
    if client:
        kwargs["client_kwargs"] = client
    if options.profile:
        kwargs["profile"] = options.profile
    if options.anon:
        kwargs["anon"] = True
    return kwargs
