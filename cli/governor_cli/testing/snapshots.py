"""CreateSnapshots' ``CopyTagsFromSource=volume`` on the emulator: moto 5 takes the multi-volume snapshot but does not
copy each volume's tags to its snapshot (its docstring says so). :func:`copy_volume_tags` teaches it what EC2 does:
each snapshot gets its volume's tags, then the request's own tag specifications. Test and demo tooling only, never
imported by a Lambda.
"""

from __future__ import annotations

from typing import Any

_COPYING = {"on": False}


def copy_volume_tags() -> None:
    """Make the emulator honour ``CopyTagsFromSource=volume`` in CreateSnapshots (idempotent)."""
    from moto.ec2.models.elastic_block_store import EBSBackend
    from moto.ec2.responses.elastic_block_store import ElasticBlockStore

    if getattr(ElasticBlockStore, "_governor_copy_tags", False):
        return
    respond, take = ElasticBlockStore.create_snapshots, EBSBackend.create_snapshots

    def create_snapshots_response(self: Any) -> Any:
        _COPYING["on"] = self._get_param("CopyTagsFromSource") == "volume"
        try:
            return respond(self)
        finally:
            _COPYING["on"] = False

    def create_snapshots(self: Any, instance_spec: dict[str, Any], description: str, tags: dict[str, str]) -> Any:
        snapshots = take(self, instance_spec, description, tags)
        if _COPYING["on"]:
            for snapshot in snapshots:
                copied = {t["key"]: t["value"] for t in snapshot.volume.get_tags()}
                snapshot.add_tags({**copied, **tags})
        return snapshots

    ElasticBlockStore.create_snapshots = create_snapshots_response  # type: ignore[method-assign]
    EBSBackend.create_snapshots = create_snapshots  # type: ignore[method-assign]
    ElasticBlockStore._governor_copy_tags = True  # type: ignore[attr-defined]
