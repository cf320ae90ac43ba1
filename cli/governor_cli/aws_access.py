"""What the ``governor`` command says about AWS access, in one wording for every command: missing credentials, no
region, and an AWS error, each one line (exit 2 through :class:`governor_cli.errors.UsageError`), never a traceback.

Before this module ``status`` said "no AWS credentials: set AWS_PROFILE or the AWS_* variables", ``idle`` and
``ledger`` "ledger table T: Unable to locate credentials", ``dlq`` "cannot reach AWS: Unable to locate credentials"
and ``backtest`` "cannot list the instances (NoCredentialsError: ...)"; and ``status --stack`` without a region printed
"stack X in None".
"""

from __future__ import annotations

import os
import re
from typing import Any

NO_CREDENTIALS = (
    "no AWS credentials: set AWS_PROFILE (a profile from aws configure) or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
)
NO_REGION = "no AWS region: pass --region NAME, set AWS_REGION or AWS_DEFAULT_REGION, or give the profile a region"
#: botocore's NoRegionError text, which names neither a flag nor a variable.
BOTOCORE_NO_REGION = "You must specify a region."
#: A region name's shape: us-east-1, eu-central-2, ap-southeast-4, us-gov-west-1, cn-north-1, us-isob-east-1.
REGION_NAME = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d{1,2}$")
#: Errors that mean the credentials exist but AWS will not take them.
REFUSED_CREDENTIALS = frozenset(
    {"ExpiredToken", "ExpiredTokenException", "InvalidClientTokenId", "UnrecognizedClientException", "RequestExpired"}
)


def _usage(message: str) -> Exception:
    from governor_cli.errors import UsageError

    return UsageError(message)


def check_region(region: str | None) -> None:
    """``--region`` is a region name, or a UsageError naming the flag."""
    if region and not REGION_NAME.match(region):
        raise _usage(f"--region {region!r}: not a region name such as us-east-1")


def resolve_region(given: str | None, fallback: str | None = None) -> str:
    """The region a command calls: ``--region``, else ``fallback`` (a table ARN's region), else ``AWS_REGION`` /
    ``AWS_DEFAULT_REGION``, else the profile's; none of them is a one-line error (exit 2), never "in None"."""
    check_region(given)
    for found in (given, fallback, os.environ.get("AWS_REGION"), os.environ.get("AWS_DEFAULT_REGION")):
        if found:
            return found
    import boto3
    from botocore.exceptions import BotoCoreError

    try:
        profiled = boto3.session.Session().region_name
    except BotoCoreError as error:  # a named profile that does not exist
        raise failure(error, "AWS profile") from None
    if not profiled:
        raise _usage(NO_REGION)
    return str(profiled)


def failure(error: BaseException, subject: str) -> Exception:
    """The one line for an AWS error while reading ``subject``: missing credentials and region in one wording for
    every command; otherwise what was read, the error code and AWS's message, on one line."""
    from botocore.exceptions import (
        ClientError,
        CredentialRetrievalError,
        NoCredentialsError,
        NoRegionError,
        PartialCredentialsError,
        ProfileNotFound,
    )

    if isinstance(error, NoCredentialsError | PartialCredentialsError | CredentialRetrievalError):
        return _usage(NO_CREDENTIALS)
    if isinstance(error, NoRegionError) or BOTOCORE_NO_REGION in str(error):
        return _usage(NO_REGION)
    if isinstance(error, ProfileNotFound):
        return _usage(f"{' '.join(str(error).split())}: set AWS_PROFILE to a profile of aws configure list-profiles")
    if isinstance(error, ClientError):
        info: dict[str, Any] = error.response.get("Error", {})
        code, message = info.get("Code", "error"), " ".join(str(info.get("Message", "")).split())
        if code in REFUSED_CREDENTIALS:
            return _usage(f"AWS refused the credentials ({code}: {message}): renew them (aws sso login, aws configure)")
        return _usage(f"{subject}: AWS refused {error.operation_name} ({code}: {message})")
    return _usage(f"{subject}: cannot reach AWS ({' '.join(str(error).split())})")


def is_aws_error(error: BaseException) -> bool:
    """botocore's errors (ClientError and BotoCoreError), recognised without importing botocore."""
    return type(error).__module__.startswith("botocore")
