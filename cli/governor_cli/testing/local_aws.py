"""moto's server on the loopback interface, as the real CDK CLI and AWS CLI reach it (``make deploy-local``).

The CLI talks to it through ``AWS_ENDPOINT_URL``; the account is the one the docs use (moto takes its default
account from ``MOTO_ACCOUNT_ID``, read when moto is imported, so it is set first).

Shims, here in the test harness and never in the product, for the places where moto's CloudFormation differs from
AWS on a valid template:

* ``AWS::Events::Archive``: moto ``json.loads`` the ``EventPattern``, which CloudFormation accepts as an object
  (``ExecuteChangeSet`` then answers 400 with a body the SDK cannot parse), and it names the archive after the
  logical id, which can pass the 48 characters of an archive name.
* ``AWS::Events::EventBus``: moto's bus has no ``physical_resource_id``, so a ``Ref`` to it hands a rule the bus
  object instead of its name and ``ExecuteChangeSet`` fails (``'EventBus' object has no attribute 'split'``).
* ``DeleteChangeSet`` by name when no such change set exists (``cdk deploy`` sends it before every update of a
  stack, "if it exists", and AWS answers success): moto 5.2.5 raises ``UnboundLocalError`` (HTTP 500); here it
  answers as AWS does.
* The endpoint is given as ``http://localhost:PORT``, not ``127.0.0.1``: moto's CloudFormation reads a
  ``TemplateURL`` path-style only when the host says ``localhost``; with an IP it takes ``127`` for the bucket
  (``CreateChangeSet``: "The specified bucket does not exist", what issue 32 found).

Resource types moto's CloudFormation does not implement are skipped by moto with a warning per resource;
``skipped_types`` lists them once per deployed stack with their counts, so nothing is skipped silently (the
per-resource warnings and the server's access log are silenced).
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

ACCOUNT = "111122223333"


def _shim_archive() -> None:
    from moto.events import models

    original = models.Archive.create_from_cloudformation_json.__func__  # type: ignore[attr-defined]

    def create(cls: Any, resource_name: str, cloudformation_json: Any, *args: Any, **kwargs: Any) -> Any:
        properties = dict(cloudformation_json.get("Properties", {}))
        if isinstance(properties.get("EventPattern"), dict):
            properties["EventPattern"] = json.dumps(properties["EventPattern"])
        shaped = {**cloudformation_json, "Properties": properties}
        return original(cls, resource_name[-48:], shaped, *args, **kwargs)

    models.Archive.create_from_cloudformation_json = classmethod(create)  # type: ignore[method-assign,assignment]


def _shim_event_bus() -> None:
    from moto.events import models

    if not isinstance(getattr(models.EventBus, "physical_resource_id", None), property):
        models.EventBus.physical_resource_id = property(lambda self: self.name)  # type: ignore[attr-defined]


def _shim_delete_change_set() -> None:
    from moto.cloudformation import models

    original = models.CloudFormationBackend.delete_change_set

    def delete_change_set(self: Any, change_set_name: str) -> None:
        known = change_set_name in self.change_sets or any(
            cs.change_set_name == change_set_name for cs in self.change_sets.values()
        )
        if known:
            original(self, change_set_name)

    models.CloudFormationBackend.delete_change_set = delete_change_set  # type: ignore[method-assign]


def _quiet() -> None:
    """No access log line per request and no per-resource "not supported" warning: the check lists the skipped
    resource types of each deployed stack itself (``skipped_types``), once, with their counts."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    logging.getLogger("moto").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="Tried to parse .* but it's not supported", category=UserWarning)


@contextmanager
def local_aws(account: str = ACCOUNT) -> Iterator[str]:
    """A running moto server with the shims; yields its endpoint URL (``http://localhost:PORT``)."""
    os.environ.setdefault("MOTO_ACCOUNT_ID", account)
    from moto.server import ThreadedMotoServer

    _shim_archive()
    _shim_event_bus()
    _shim_delete_change_set()
    _quiet()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        _, port = server.get_host_and_port()
        yield f"http://localhost:{port}"
    finally:
        server.stop()


def client_environment(endpoint: str, region: str) -> dict[str, str]:
    """What a shell needs to send the CDK CLI, the AWS CLI and ``governor`` to the emulator, and nowhere else."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_"))}
    return keep | {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": region,
        "AWS_REGION": region,
        "AWS_EC2_METADATA_DISABLED": "true",
        "CDK_DISABLE_VERSION_CHECK": "1",
        "CDK_DISABLE_CLI_TELEMETRY": "1",
    }


def skipped_types(template: dict[str, Any], created: list[dict[str, Any]]) -> dict[str, int]:
    """Resource types of ``template`` the emulator did not create (``ListStackResources``), with their counts."""
    made = {resource["LogicalResourceId"] for resource in created}
    skipped: dict[str, int] = {}
    for logical_id, resource in template.get("Resources", {}).items():
        if logical_id not in made and "Condition" not in resource:
            skipped[resource["Type"]] = skipped.get(resource["Type"], 0) + 1
    return dict(sorted(skipped.items()))
