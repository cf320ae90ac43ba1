"""Keys' scenarios: a KMS key's rotation switched off (switched back on); in the demo, old access keys and the daily
sweep."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from governor_cli.demo.trail import Principal
from governor_cli.testing.scenarios import Case, cloudtrail_call

if TYPE_CHECKING:
    from governor_cli.demo.run import Simulation
    from governor_cli.testing.scenarios import Scenarios

SOAK: dict[str, Any] = {"enforce": True}


def keys_rotation_disabled(scenarios: Scenarios, index: int) -> Case:
    key = scenarios.kms.create_key(Description=f"training data key {index}")["KeyMetadata"]
    event = cloudtrail_call("aws.kms", "DisableKeyRotation", {"keyId": key["KeyId"]}, {"keyId": key["Arn"]})
    return Case(f"key rotation disabled #{index}", "keys", event, key["KeyId"])


CASES = ((3, keys_rotation_disabled),)


# --- the demo ---------------------------------------------------------------------------------------------------

#: The CloudTrail calls its rule receives in the demo (``Simulation.api_call`` delivers them).
CLOUDTRAIL_CALLS = frozenset({"DisableKeyRotation"})


def target_ports(target: dict[str, Any], runtime: Any) -> Any:
    """Organisation mode: its adapters in a member account and region (its handler's fan-out target builder)."""
    from governor.keys.handler import target_adapters

    return target_adapters(target, runtime)


def _backdate_access_keys(user: str, days: int, account: str) -> None:
    """Emulator set-up only: make the user's access keys ``days`` old (moto stamps keys with the current time)."""
    from moto.backends import get_backend

    backend = get_backend("iam")[account]["global"]
    for key in backend.users[user].access_keys:
        key.create_date = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(days=days)


def set_up(sim: Simulation) -> None:
    """A KMS key with rotation on (the site's ``kms_key``), and IAM users whose access keys are 10, 80 and 120 days
    old (in each account's first region: IAM is global)."""
    kms = sim.site.client("kms")
    key_id: str = kms.create_key(Description="training-data", KeyUsage="ENCRYPT_DECRYPT")["KeyMetadata"]["KeyId"]
    kms.enable_key_rotation(KeyId=key_id, RotationPeriodInDays=90)
    iam = sim.site.client("iam")
    users = (("ci-deployer", 120), ("notebook-sync", 80), ("metrics-export", 10))
    for user, age in users if sim.first_in_account() else ():
        iam.create_user(UserName=user)
        iam.create_access_key(UserName=user)
        _backdate_access_keys(user, age, sim.site.account)
    sim.site.kms_key = key_id


def incidents(sim: Simulation) -> dict[int, Callable[[], None]]:
    """Two hours into the day an administrator switches the key's rotation off; an hour later the daily sweep runs."""
    key_id = sim.site.kms_key
    admin = Principal("ops-admin")

    def rotation_off() -> None:
        sim.site.client("kms").disable_key_rotation(KeyId=key_id)
        sim.api_call(admin, "kms.amazonaws.com", "DisableKeyRotation", request={"keyId": key_id})

    def keys_sweep() -> None:
        # IAM is global: an account's access keys are swept from its first region only (as a schedule per
        # account and region would be configured), KMS keys and secrets in every region.
        sim.invoke("keys", sim.scheduled(None if sim.first_in_account() else {"kinds": ["kms", "secrets"]}))

    return {120: rotation_off, 180: keys_sweep}
