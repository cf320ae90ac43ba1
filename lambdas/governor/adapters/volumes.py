"""What stopped instances still bill, read in two paginated calls for all of them: their EBS volumes
(``DescribeVolumes`` filtered on ``attachment.instance-id``) and their public IPv4 addresses (``DescribeAddresses``
filtered on ``instance-id``: an address still associated with a stopped instance is an Elastic IP).
"""

from __future__ import annotations

from typing import Any

from governor.adapters.aws import client
from governor.domain.storage import Volume

IAM_ACTIONS = frozenset({"ec2:DescribeVolumes", "ec2:DescribeAddresses", "ec2:DescribeSnapshots"})
#: The tag every snapshot the governor takes of a stopped instance carries (besides the volume's own tags).
SNAPSHOT_OF_TAG = "governor:snapshot-of"
#: DescribeVolumes and DescribeAddresses take at most 200 values a filter.
_BATCH = 200


def to_volume(raw: dict[str, Any]) -> Volume:
    attachments = raw.get("Attachments") or [{}]
    return Volume(
        id=raw["VolumeId"],
        type=raw.get("VolumeType") or "unknown",
        size_gib=int(raw.get("Size") or 0),
        iops=int(raw["Iops"]) if raw.get("Iops") is not None else None,
        throughput=int(raw["Throughput"]) if raw.get("Throughput") is not None else None,
        tags={t["Key"]: t.get("Value", "") for t in raw.get("Tags", [])},
        device=attachments[0].get("Device"),
    )


class InstanceStorage:
    """Counts its API calls so the benchmarks can report them."""

    def __init__(
        self, region: str | None = None, ec2: Any = None, *, account: str | None = None, event_id: str | None = None
    ) -> None:
        self._ec2 = ec2 or client("ec2", region, account=account, event_id=event_id)
        self.calls = 0

    def volumes(self, instance_ids: list[str]) -> dict[str, list[Volume]]:
        """Instance id -> the EBS volumes attached to it."""
        found: dict[str, list[Volume]] = {}
        paginator = self._ec2.get_paginator("describe_volumes")
        for start in range(0, len(instance_ids), _BATCH):
            batch = instance_ids[start : start + _BATCH]
            for page in paginator.paginate(Filters=[{"Name": "attachment.instance-id", "Values": batch}]):
                self.calls += 1
                for raw in page.get("Volumes", []):
                    for attachment in raw.get("Attachments", []):
                        if attachment.get("InstanceId") in batch:
                            found.setdefault(attachment["InstanceId"], []).append(to_volume(raw))
        return found

    def public_ips(self, instance_ids: list[str]) -> dict[str, list[str]]:
        """Instance id -> the public IPv4 addresses associated with it."""
        found: dict[str, list[str]] = {}
        for start in range(0, len(instance_ids), _BATCH):
            batch = instance_ids[start : start + _BATCH]
            self.calls += 1
            answer = self._ec2.describe_addresses(Filters=[{"Name": "instance-id", "Values": batch}])
            for raw in answer.get("Addresses", []):
                if raw.get("InstanceId") in batch and raw.get("PublicIp"):
                    found.setdefault(raw["InstanceId"], []).append(raw["PublicIp"])
        return found

    def snapshot(self, instance_id: str, label: str) -> dict[str, str]:
        """Snapshot every EBS volume of ``instance_id`` at once (``CreateSnapshots``: crash-consistent across its
        volumes), each with its volume's tags and :data:`SNAPSHOT_OF_TAG`; volume id -> snapshot id."""
        self.calls += 1
        answer = self._ec2.create_snapshots(
            InstanceSpecification={"InstanceId": instance_id, "ExcludeBootVolume": False},
            Description=label,
            CopyTagsFromSource="volume",
            TagSpecifications=[{"ResourceType": "snapshot", "Tags": [{"Key": SNAPSHOT_OF_TAG, "Value": instance_id}]}],
        )
        return {str(s["VolumeId"]): str(s["SnapshotId"]) for s in answer.get("Snapshots", [])}

    def snapshot_states(self, snapshot_ids: list[str]) -> dict[str, str]:
        """Snapshot id -> its state (``pending``, ``completed``, ``error``...); a snapshot EC2 no longer has is left
        out (so never counted completed)."""
        found: dict[str, str] = {}
        for start in range(0, len(snapshot_ids), _BATCH):
            self.calls += 1
            answer = self._ec2.describe_snapshots(
                Filters=[{"Name": "snapshot-id", "Values": snapshot_ids[start : start + _BATCH]}]
            )
            found.update({str(s["SnapshotId"]): str(s.get("State")) for s in answer.get("Snapshots", [])})
        return found
