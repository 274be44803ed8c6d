"""One reading of the standard AWS environment variables for every S3 client of the project.

The ledger's boto3 client, the analysis reader's boto3 client and polars (object_store) `storage_options`
all resolve the endpoint, region and credentials here, so a writer and a reader of the same run always
talk to the same server. The endpoint follows boto3's precedence: the service-specific
AWS_ENDPOINT_URL_S3 over the global AWS_ENDPOINT_URL.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

# The variables `s3_settings` reads (a cache of clients keys on their values).
S3_ENV_VARS = (
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
)


@dataclass(frozen=True)
class S3Settings:
    """Endpoint (None: the AWS default), region and credentials (None: boto3's own chain / anonymous)."""

    endpoint: str | None
    region: str
    access_key_id: str | None
    secret_access_key: str | None
    session_token: str | None


def s3_settings(env: Mapping[str, str] | None = None) -> S3Settings:
    """The S3 endpoint, region and credentials from `env` (default: the process environment).

    AWS_ENDPOINT_URL_S3 wins over AWS_ENDPOINT_URL, AWS_REGION over AWS_DEFAULT_REGION (default us-east-1);
    empty values count as unset.

    Args:
        env: The environment to read (default: the process environment).
    """
    e = os.environ if env is None else env

    def get(var: str) -> str | None:
        return e.get(var) or None

    return S3Settings(
        endpoint=get("AWS_ENDPOINT_URL_S3") or get("AWS_ENDPOINT_URL"),
        region=get("AWS_REGION") or get("AWS_DEFAULT_REGION") or "us-east-1",
        access_key_id=get("AWS_ACCESS_KEY_ID"),
        secret_access_key=get("AWS_SECRET_ACCESS_KEY"),
        session_token=get("AWS_SESSION_TOKEN"),
    )


def endpoint_label(env: Mapping[str, str] | None = None) -> str:
    """The endpoint for error messages: the URL, or "the AWS default" when none is configured.

    Args:
        env: The environment to read (default: the process environment).
    """
    return s3_settings(env).endpoint or "the AWS default"


def storage_options(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """polars/object_store options for s3:// from the same settings the boto3 clients use.

    Args:
        env: The environment to read (default: the process environment).
    """
    s = s3_settings(env)
    opts: dict[str, str] = {"aws_region": s.region}
    for key, value in (
        ("aws_endpoint_url", s.endpoint),
        ("aws_access_key_id", s.access_key_id),
        ("aws_secret_access_key", s.secret_access_key),
        ("aws_session_token", s.session_token),
    ):
        if value:
            opts[key] = value
    if opts.get("aws_endpoint_url", "").startswith("http://"):
        opts["aws_allow_http"] = "true"
    if "aws_access_key_id" not in opts:
        # An anonymous endpoint: don't let object_store wander off to the instance-metadata service.
        opts["aws_skip_signature"] = "true"
    return opts
