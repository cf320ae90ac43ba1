"""Shared by the organisation tests: credentials in another moto account."""

from __future__ import annotations

import boto3


def account_session(account: str, region: str) -> boto3.session.Session:
    """A Session in ``account`` (moto maps assumed-role credentials to the role's account); the account must hold a
    ``test-setup`` role, as moto lets any principal assume it."""
    answer = boto3.client("sts", region_name=region).assume_role(
        RoleArn=f"arn:aws:iam::{account}:role/test-setup", RoleSessionName="setup"
    )
    creds = answer["Credentials"]
    return boto3.session.Session(
        aws_access_key_id=creds["AccessKeyId"],
        aws_secret_access_key=creds["SecretAccessKey"],
        aws_session_token=creds["SessionToken"],
        region_name=region,
    )
