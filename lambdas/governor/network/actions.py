"""The network capability's typed actions: revoking offending ingress rules and removing public addresses from GPU
instances, each with the IAM actions it takes and the re-read that says whether the exposure is gone."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import Field

from governor.domain.actions import Acting, Action, Outcome
from governor.domain.verification import Verification

if TYPE_CHECKING:
    from governor.domain.fleet import Instance


class _Revoker(Protocol):
    def revoke(self, group_id: str, rule_id: str) -> bool: ...


class GroupChanges(Protocol):
    @property
    def groups(self) -> _Revoker: ...


class _AddressWrites(Protocol):
    def disassociate(self, association_id: str) -> None: ...

    def drop_auto_assigned(self, network_interface_id: str) -> None: ...

    def auto_assigned(self, instance: Instance) -> Any:
        """The public address the instance holds now, as auto-assigned (``public_ip``, ``network_interface_id``)."""
        ...


class _InstanceReads(Protocol):
    def instance(self, instance_id: str) -> Instance | None: ...


class AddressChanges(Protocol):
    @property
    def addresses(self) -> _AddressWrites: ...

    @property
    def instances(self) -> _InstanceReads: ...


class RevokeIngress(Action):
    type: Literal["revoke_ingress"] = "revoke_ingress"
    group_id: str | None = None
    rule_ids: list[str] = Field(default_factory=list)
    protocol: str | None = None
    ports: str | None = None
    source: str | None = None
    reason: str | None = None
    IAM = frozenset({"ec2:RevokeSecurityGroupIngress"})
    FIXES = True

    def execute(self, aws: GroupChanges, at: Acting) -> Outcome:
        """Revoke each offending rule by its own id, so compliant rules added by the same call stay."""
        group_id = str(self.group_id)
        revoked: list[str] = []
        for rule_id in self.rule_ids:
            if aws.groups.revoke(group_id, rule_id):
                revoked.append(f"revoked {rule_id} ({self.protocol} {self.ports} from {self.source})")
            else:
                revoked.append(f"{rule_id} was already gone")
        return Outcome(
            ok=True, done="; ".join(revoked) or f"no rule id found for {self.source} in {group_id}; nothing revoked"
        )

    def verify(self, aws: Any, at: Acting) -> Verification:
        group_id = str(self.group_id or at.resource)
        live = aws.groups.group(group_id)
        if live is None:
            return Verification(fixed=True, seen=f"security group {group_id} no longer exists")
        left = sorted({rule.rule_id for rule in live.rules} & set(self.rule_ids or ()))
        if left:
            return Verification(fixed=False, seen=f"rule(s) {', '.join(left)} still in {group_id}")
        return Verification(fixed=True, seen=f"rule(s) gone from {group_id}")


class RemovePublicIp(Action):
    """Disassociate an Elastic IP, or turn off the primary interface's auto-assigned public IPv4 address."""

    type: Literal["remove_public_ip"] = "remove_public_ip"
    instance_id: str | None = None
    public_ip: str | None = None
    method: Literal["disassociate_address", "modify_network_interface_attribute"] | None = None
    address: str | None = None
    association_id: str | None = None
    allocation_id: str | None = None
    network_interface_id: str | None = None
    IAM = frozenset({"ec2:DisassociateAddress", "ec2:ModifyNetworkInterfaceAttribute"})
    FIXES = True

    def execute(self, aws: AddressChanges, at: Acting) -> Outcome:
        instance_id = str(self.instance_id)
        if self.method == "disassociate_address" and self.association_id:
            return Outcome(ok=True, done=self._disassociate(aws, instance_id))
        if self.method == "modify_network_interface_attribute" and self.network_interface_id:
            aws.addresses.drop_auto_assigned(self.network_interface_id)
            return Outcome(
                ok=True,
                done=f"removed auto-assigned public IPv4 {self.public_ip} from {instance_id} "
                f"(ModifyNetworkInterfaceAttribute AssociatePublicIpAddress=false on {self.network_interface_id})",
            )
        return Outcome(
            ok=True,
            done=f"could not remove the public address of {instance_id}: no association or network interface found",
        )

    def verify(self, aws: Any, at: Acting) -> Verification:
        instance_id = str(self.instance_id or at.resource)
        live = aws.instances.instance(instance_id)
        if live is None:
            return Verification(fixed=True, seen=f"instance {instance_id} no longer exists")
        if live.public_ip:
            return Verification(fixed=False, seen=f"instance {instance_id} still has public IPv4 {live.public_ip}")
        return Verification(fixed=True, seen=f"instance {instance_id} has no public IPv4 address")

    def _disassociate(self, aws: AddressChanges, instance_id: str) -> str:
        aws.addresses.disassociate(str(self.association_id))
        done = (
            f"disassociated Elastic IP {self.public_ip} ({self.association_id}) from {instance_id}; "
            "the allocation stays in the account"
        )
        # AWS gives an instance whose interface auto-assigns a fresh public address when its Elastic IP leaves.
        after = aws.instances.instance(instance_id)
        replacement = aws.addresses.auto_assigned(after) if after is not None else None
        if replacement is None or replacement.public_ip == self.public_ip:
            return done
        if replacement.network_interface_id:
            aws.addresses.drop_auto_assigned(replacement.network_interface_id)
            return (
                f"{done}; then removed the auto-assigned {replacement.public_ip} AWS gave in its place "
                f"(AssociatePublicIpAddress=false on {replacement.network_interface_id})"
            )
        return f"{done}; AWS gave it a new public address {replacement.public_ip}, which the sweep will report"
