"""Shared by the organisation tests: credentials in another moto account."""

from __future__ import annotations

import boto3

from governor_cli.demo.run import setup_session


def account_session(account: str, region: str) -> boto3.session.Session:
    """A Session in ``account`` through its ``test-setup`` role (moto lets any principal assume it)."""
    session: boto3.session.Session = setup_session(account, region, role="test-setup")
    return session
