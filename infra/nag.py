"""The one place cdk-nag is wired, and where every acknowledged finding is written with its reason.

cdk-nag 3.x runs as a CDK policy-validation plugin: with an unacknowledged finding, synthesis fails.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, App, Validations
from cdk_nag import AwsSolutionsChecks
from constructs import IConstruct


def enable(app: App) -> None:
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))


def acknowledge(scope: IConstruct, rule: str, reason: str) -> None:
    """Acknowledge ``rule`` on ``scope`` and its children; the reason must say why it is safe here."""
    Validations.of(scope).acknowledge(Acknowledgment(id=rule, reason=reason))
