"""Public IPv4 addresses for the network policy: which are Elastic IPs, and removing them the way AWS allows.

An Elastic IP is disassociated (the allocation stays in the account); an auto-assigned address is dropped by setting
``AssociatePublicIpAddress=false`` on the instance's primary network interface.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from governor.adapters.aws import client
from governor.domain.fleet import Instance
from governor.network.events import PublicAddress, public_address

# Reads only: what carrying out an action calls is declared by its class in governor.domain.actions.
IAM_ACTIONS = frozenset({"ec2:DescribeAddresses", "ec2:DescribeNetworkInterfaces"})
_FILTER_VALUES = 200


class PublicAddresses:
    """Counts its API calls so the benchmark can report them."""

    def __init__(self, region: str | None = None, ec2: Any = None) -> None:
        self._ec2 = ec2 or client("ec2", region)
        self.calls = 0

    def elastic(self, public_ips: list[str]) -> dict[str, PublicAddress]:
        """The Elastic IPs among ``public_ips`` (with association ids); an address not listed was auto-assigned."""
        found: dict[str, PublicAddress] = {}
        wanted = sorted(set(public_ips))
        for start in range(0, len(wanted), _FILTER_VALUES):
            self.calls += 1
            response = self._ec2.describe_addresses(
                Filters=[{"Name": "public-ip", "Values": wanted[start : start + _FILTER_VALUES]}]
            )
            for raw in response.get("Addresses", []):
                found[raw["PublicIp"]] = PublicAddress(
                    public_ip=raw["PublicIp"],
                    elastic=True,
                    association_id=raw.get("AssociationId"),
                    allocation_id=raw.get("AllocationId"),
                    network_interface_id=raw.get("NetworkInterfaceId"),
                )
        return found

    def instance_of_interface(self, network_interface_id: str) -> str | None:
        """The instance a network interface is attached to, or None (detached or gone)."""
        self.calls += 1
        try:
            response = self._ec2.describe_network_interfaces(NetworkInterfaceIds=[network_interface_id])
        except ClientError as error:
            if error.response["Error"]["Code"] == "InvalidNetworkInterfaceID.NotFound":
                return None
            raise
        for raw in response.get("NetworkInterfaces", []):
            instance = (raw.get("Attachment") or {}).get("InstanceId")
            if instance:
                return str(instance)
        return None

    def disassociate(self, association_id: str) -> None:
        """Disassociate an Elastic IP; idempotent in AWS, so a retried delivery is harmless."""
        self.calls += 1
        self._ec2.disassociate_address(AssociationId=association_id)

    def drop_auto_assigned(self, network_interface_id: str) -> None:
        """Remove the auto-assigned public IPv4 address of a primary network interface."""
        self.calls += 1
        self._ec2.modify_network_interface_attribute(
            NetworkInterfaceId=network_interface_id, AssociatePublicIpAddress=False
        )

    def auto_assigned(self, instance: Instance) -> PublicAddress | None:
        """The instance's public IPv4 address as auto-assigned: what AWS gives an interface whose Elastic IP left
        (its primary network interface holds it). No call: the instance was just re-read."""
        return public_address(instance, {})
