"""Shared by the organisation tests: credentials in another moto account."""

from __future__ import annotations

import json

import boto3

from governor_cli.demo.run import setup_session


def account_session(account: str, region: str) -> boto3.session.Session:
    """A Session in ``account`` through its ``test-setup`` role (moto lets any principal assume it)."""
    session: boto3.session.Session = setup_session(account, region, role="test-setup")
    return session


def spoke_role(session: boto3.session.Session, function: str, region: str, hub: str) -> None:
    """The spoke role ``GovernorSpoke-<function>-<region>`` the StackSet deploys, assumable by the hub account."""
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{hub}:root"}, "Action": "sts:AssumeRole"}
        ],
    }
    session.client("iam").create_role(
        RoleName=f"GovernorSpoke-{function}-{region}", AssumeRolePolicyDocument=json.dumps(trust)
    )
