"""The CloudTrail table's columns, declared once for both engines.

The Glue table (Athena) and the local DuckDB view are generated from this list, so a query that runs on one sees
the same names and types on the other. Names are the lower-case Hive names; ``key`` is the CloudTrail JSON key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["string", "json", "struct", "array"]


@dataclass(frozen=True)
class Column:
    """One column (or struct field): ``string`` values, ``json`` values kept as their JSON text, structs, arrays."""

    name: str
    key: str
    kind: Kind = "string"
    fields: tuple[Column, ...] = ()

    def hive_type(self) -> str:
        """The Glue/Athena type, e.g. ``struct<type:string,arn:string>``."""
        if self.kind in ("string", "json"):
            return "string"
        inner = ",".join(f"{field.name}:{field.hive_type()}" for field in self.fields)
        return f"struct<{inner}>" if self.kind == "struct" else f"array<struct<{inner}>>"

    def read_type(self) -> str:
        """The DuckDB type that ``read_json`` parses the raw (camelCase) JSON value into."""
        if self.kind == "string":
            return "VARCHAR"
        if self.kind == "json":
            return "JSON"
        inner = ", ".join(f'"{field.key}" {field.read_type()}' for field in self.fields)
        return f"STRUCT({inner})" if self.kind == "struct" else f"STRUCT({inner})[]"

    def view_type(self) -> str:
        """The DuckDB type the view exposes: the Hive type with lower-case names."""
        if self.kind in ("string", "json"):
            return "VARCHAR"
        inner = ", ".join(f"{field.name} {field.view_type()}" for field in self.fields)
        return f"STRUCT({inner})" if self.kind == "struct" else f"STRUCT({inner})[]"

    def view_expression(self, source: str) -> str:
        """SQL turning the raw value at ``source`` into the view's value (renaming struct fields to lower case)."""
        if self.kind == "string":
            return source
        if self.kind == "json":
            return f"CAST({source} AS VARCHAR)"
        if self.kind == "struct":
            inner = ", ".join(f"{f.name} := {f.view_expression(f'{source}.{_quote(f.key)}')}" for f in self.fields)
            return f"CASE WHEN {source} IS NULL THEN NULL ELSE struct_pack({inner}) END"
        inner = ", ".join(f"{f.name} := {f.view_expression(f'x.{_quote(f.key)}')}" for f in self.fields)
        return f"list_transform({source}, x -> struct_pack({inner}))"


def _quote(key: str) -> str:
    return '"' + key.replace('"', '""') + '"'


def _s(key: str) -> Column:
    return Column(key.lower(), key)


def _j(key: str) -> Column:
    return Column(key.lower(), key, "json")


SESSION_ISSUER = Column(
    "sessionissuer",
    "sessionIssuer",
    "struct",
    (_s("type"), _s("principalId"), _s("arn"), _s("accountId"), _s("userName")),
)
SESSION_CONTEXT = Column(
    "sessioncontext",
    "sessionContext",
    "struct",
    (
        Column("attributes", "attributes", "struct", (_s("mfaAuthenticated"), _s("creationDate"))),
        SESSION_ISSUER,
        _s("ec2RoleDelivery"),
        _s("sourceIdentity"),
    ),
)
USER_IDENTITY = Column(
    "useridentity",
    "userIdentity",
    "struct",
    (
        _s("type"),
        _s("principalId"),
        _s("arn"),
        _s("accountId"),
        _s("invokedBy"),
        _s("accessKeyId"),
        _s("userName"),
        Column("onbehalfof", "onBehalfOf", "struct", (_s("userId"), _s("identityStoreArn"))),
        SESSION_CONTEXT,
    ),
)

COLUMNS: tuple[Column, ...] = (
    _s("eventVersion"),
    USER_IDENTITY,
    _s("eventTime"),
    _s("eventSource"),
    _s("eventName"),
    _s("awsRegion"),
    _s("sourceIPAddress"),
    _s("userAgent"),
    _s("errorCode"),
    _s("errorMessage"),
    _j("requestParameters"),
    _j("responseElements"),
    _j("additionalEventData"),
    Column("requestid", "requestID"),
    Column("eventid", "eventID"),
    _s("readOnly"),
    Column("resources", "resources", "array", (Column("arn", "ARN"), _s("accountId"), _s("type"))),
    _s("eventType"),
    _s("apiVersion"),
    _s("recipientAccountId"),
    _j("serviceEventDetails"),
    Column("sharedeventid", "sharedEventID"),
    _s("vpcEndpointId"),
    _s("vpcEndpointAccountId"),
    _s("eventCategory"),
    _s("sessionCredentialFromConsole"),
    Column("tlsdetails", "tlsDetails", "struct", (_s("tlsVersion"), _s("cipherSuite"), _s("clientProvidedHostHeader"))),
)

# Partition columns, in the order of the Glue table's partition keys and of the S3 key.
PARTITION_KEYS: tuple[str, ...] = ("account", "region", "day")

TABLE_NAME = "cloudtrail_logs"

# AWS Regions the region partition is projected over (the trail is multi-region).
REGIONS: tuple[str, ...] = (
    "us-east-1",
    "us-east-2",
    "us-west-1",
    "us-west-2",
    "af-south-1",
    "ap-east-1",
    "ap-east-2",
    "ap-south-1",
    "ap-south-2",
    "ap-southeast-1",
    "ap-southeast-2",
    "ap-southeast-3",
    "ap-southeast-4",
    "ap-southeast-5",
    "ap-southeast-6",
    "ap-southeast-7",
    "ap-northeast-1",
    "ap-northeast-2",
    "ap-northeast-3",
    "ca-central-1",
    "ca-west-1",
    "eu-central-1",
    "eu-central-2",
    "eu-west-1",
    "eu-west-2",
    "eu-west-3",
    "eu-south-1",
    "eu-south-2",
    "eu-north-1",
    "il-central-1",
    "me-south-1",
    "me-central-1",
    "mx-central-1",
    "sa-east-1",
)


def hive_columns() -> list[tuple[str, str]]:
    """(name, Hive type) of every data column, in table order."""
    return [(column.name, column.hive_type()) for column in COLUMNS]
