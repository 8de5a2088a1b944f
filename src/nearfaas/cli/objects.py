"""`nearfaas put | get | ls`: objects in the cluster's S3 store."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from nearfaas.cli.common import common_gateway, common_state, console, err, fail, s3_for, split_s3


@click.command()
@click.argument("source", type=click.Path(exists=True, dir_okay=False))
@click.argument("target")
@common_state
@common_gateway
def put(source, target, state, gateway):
    """Upload a file: nearfaas put FILE s3://bucket/key (the bucket is created if missing)."""
    bucket, key = split_s3(target)
    key = key or Path(source).name
    client = s3_for(state, gateway)
    _ensure_bucket(client, bucket)
    size = Path(source).stat().st_size
    from rich.progress import DownloadColumn, Progress, TransferSpeedColumn

    with Progress(*Progress.get_default_columns(), DownloadColumn(), TransferSpeedColumn(), console=err, transient=True) as progress:
        task = progress.add_task(f"put {key}", total=size)
        client.upload_file(source, bucket, key, Callback=lambda n: progress.advance(task, n))
    console.print(f"uploaded {size} bytes to s3://{bucket}/{key}")


def _ensure_bucket(client, bucket: str) -> None:
    from botocore.exceptions import ClientError

    try:
        client.head_bucket(Bucket=bucket)
    except ClientError:
        try:
            client.create_bucket(Bucket=bucket)
        except ClientError as exc:
            fail(f"cannot create bucket {bucket!r}: {exc.response['Error'].get('Message')}")
        err.print(f"created bucket {bucket}")


@click.command()
@click.argument("source")
@click.argument("target", required=False)
@common_state
@common_gateway
def get(source, target, state, gateway):
    """Download an object: nearfaas get s3://bucket/key [FILE] (stdout without FILE)."""
    from botocore.exceptions import ClientError

    bucket, key = split_s3(source)
    client = s3_for(state, gateway)
    try:
        if target:
            client.download_file(bucket, key, target)
            console.print(f"wrote s3://{bucket}/{key} to {target}")
        else:
            sys.stdout.buffer.write(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    except ClientError as exc:
        fail(f"s3://{bucket}/{key}: {exc.response['Error'].get('Code')} {exc.response['Error'].get('Message', '')}")


@click.command()
@click.argument("uri", required=False)
@common_state
@common_gateway
def ls(uri, state, gateway):
    """List buckets, or objects under s3://bucket/prefix."""
    client = s3_for(state, gateway)
    if not uri:
        for b in client.list_buckets().get("Buckets", []):
            console.print(f"{b['CreationDate']:%Y-%m-%d %H:%M:%S}  {b['Name']}")
        return
    bucket, prefix = split_s3(uri if "://" in uri else f"s3://{uri}")
    from botocore.exceptions import ClientError

    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix, Delimiter="/"):
            for cp in page.get("CommonPrefixes", []):
                console.print(f"{'PRE':>30}  {cp['Prefix']}")
            for obj in page.get("Contents", []):
                console.print(f"{obj['LastModified']:%Y-%m-%d %H:%M:%S} {obj['Size']:>10}  {obj['Key']}", highlight=False)
    except ClientError as exc:
        fail(f"{uri}: {exc.response['Error'].get('Code')}")


COMMANDS = (put, get, ls)
