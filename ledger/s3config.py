"""The S3 options polars (object_store) reads a ledger's objects with, from the standard AWS variables."""

from __future__ import annotations

import os


def storage_options() -> dict[str, str]:
    """polars/object_store options for s3:// from the standard AWS environment variables."""
    opts: dict[str, str] = {}
    env = {
        "AWS_ENDPOINT_URL": "aws_endpoint_url",
        "AWS_ACCESS_KEY_ID": "aws_access_key_id",
        "AWS_SECRET_ACCESS_KEY": "aws_secret_access_key",
        "AWS_SESSION_TOKEN": "aws_session_token",
        "AWS_REGION": "aws_region",
    }
    for var, key in env.items():
        if os.environ.get(var):
            opts[key] = os.environ[var]
    opts.setdefault("aws_region", os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))
    if opts.get("aws_endpoint_url", "").startswith("http://"):
        opts["aws_allow_http"] = "true"
    if "aws_access_key_id" not in opts:
        # An anonymous endpoint: don't let object_store wander off to the instance-metadata service.
        opts["aws_skip_signature"] = "true"
    return opts
