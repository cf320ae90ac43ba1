"""Keys' scenarios: a KMS key's rotation switched off (switched back on)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from governor_cli.testing.scenarios import Case, cloudtrail_call

if TYPE_CHECKING:
    from governor_cli.testing.scenarios import Scenarios

SOAK: dict[str, Any] = {"enforce": True}


def keys_rotation_disabled(scenarios: Scenarios, index: int) -> Case:
    key = scenarios.kms.create_key(Description=f"training data key {index}")["KeyMetadata"]
    event = cloudtrail_call("aws.kms", "DisableKeyRotation", {"keyId": key["KeyId"]}, {"keyId": key["Arn"]})
    return Case(f"key rotation disabled #{index}", "keys", event, key["KeyId"])


CASES = ((3, keys_rotation_disabled),)
