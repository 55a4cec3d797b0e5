"""The tests' S3 server: SeaweedFS starts on free loopback ports, answers S3 as S3 does for the
conditional writes the lease relies on, and leaves nothing behind when stopped."""

from __future__ import annotations

import socket
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError

from pipeline.testing.s3 import dummy_aws_env, seaweedfs_server


def test_seaweedfs_answers_conditional_puts_and_leaves_nothing_behind():
    with dummy_aws_env(), seaweedfs_server() as endpoint:
        port = int(endpoint.rsplit(":", 1)[1])
        assert list(Path("/tmp").glob(f"seaweedfs-*-{port}.sock"))  # weed made its socket
        s3 = boto3.client("s3", endpoint_url=endpoint)
        s3.create_bucket(Bucket="conditional")
        etag = s3.put_object(Bucket="conditional", Key="k", Body=b"1")["ETag"]
        for condition in ({"IfNoneMatch": "*"}, {"IfMatch": '"0123456789abcdef"'}):
            with pytest.raises(ClientError) as refused:
                s3.put_object(Bucket="conditional", Key="k", Body=b"2", **condition)
            assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
        s3.put_object(Bucket="conditional", Key="k", Body=b"3", IfMatch=etag)
        assert s3.get_object(Bucket="conditional", Key="k")["Body"].read() == b"3"
    with socket.socket() as s, pytest.raises(ConnectionRefusedError):
        s.connect(("127.0.0.1", port))  # stopped
    assert not list(Path("/tmp").glob(f"seaweedfs-*-{port}.sock"))
