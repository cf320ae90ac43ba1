"""One person, one owner: the rule that folds AWS principals and owner tags into a single name for the reports.

The same engineer shows up as an IAM user (``arn:aws:iam::123456789012:user/chen``), as an assumed-role session
(``arn:aws:sts::123456789012:assumed-role/ml-engineer/chen``, the session name is the person under SSO and most
federation set-ups), as an IAM role ARN with a path (``arn:aws:iam::123456789012:role/ml-engineer/chen``) and as an
``owner`` tag (``chen`` or ``Chen@Example.com``). Costs and findings grouped by the raw strings count one person
several times. The rule, applied in this order (documented in docs/reports.md):

1. Trim and lower-case (IAM user names and email addresses are case-insensitive for people).
2. An ARN becomes its last path segment: the session name of an ``assumed-role`` ARN, the user name of a ``user``
   ARN, the role name of a ``role`` ARN (the path before it is the role, not the person).
3. ``AWSReservedSSO_...`` roles and ``botocore-session-...`` style names stay as they are: they name no person.
4. An email address becomes its local part (``chen@example.com`` -> ``chen``), because session names and owner tags
   mix the two forms. Two people with the same local part in different domains would be merged; a fleet with that
   problem should tag owners with one form.
5. Anything empty becomes ``unknown``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from governor.events.envelopes import UserIdentity

UNKNOWN = "unknown"
_ARN = re.compile(r"^arn:aws[a-z-]*:(?:iam|sts)::\d{12}:(?P<kind>[a-z-]+)/(?P<path>.+)$")
_EMAIL = re.compile(r"^(?P<local>[^@\s]+)@[^@\s]+\.[^@\s]+$")


def normalise_owner(value: object) -> str:
    """The owner name a person is counted under (see the module docstring for the rule)."""
    text = str(value or "").strip().lower()
    if not text:
        return UNKNOWN
    if re.match(r"^arn:aws[a-z-]*:iam::\d{12}:root$", text):
        return "root"
    match = _ARN.match(text)
    if match:
        text = match.group("path").rstrip("/").rsplit("/", 1)[-1]
    email = _EMAIL.match(text)
    if email:
        text = email.group("local")
    return text or UNKNOWN


# --- who made a CloudTrail call ---------------------------------------------------------------------------------------


def creator(identity: UserIdentity | Mapping[str, Any]) -> str | None:
    """The principal behind a call, as an ARN a person can act on.

    An assumed-role session resolves through ``sessionContext.sessionIssuer`` to the role ARN plus the session
    name (``arn:aws:iam::1:role/ci/alice@example.com``), so the role and the person or job behind it both show.
    IAM users, root and federated users keep their own ARN; an AWS service is named by ``invokedBy``.
    """
    ident = identity if isinstance(identity, UserIdentity) else UserIdentity.model_validate(dict(identity))
    extra = ident.model_extra or {}
    if ident.type == "AssumedRole":
        issuer = (ident.session_context or {}).get("sessionIssuer") or {}
        role_arn = issuer.get("arn")
        session = _session_name(ident)
        if role_arn and session:
            return f"{role_arn}/{session}"
        if role_arn:
            return str(role_arn)
    if ident.arn:
        return ident.arn
    if ident.type == "AWSService" and extra.get("invokedBy"):
        return str(extra["invokedBy"])
    if ident.principal_id:
        return ident.principal_id
    return None


def _session_name(ident: UserIdentity) -> str | None:
    if ident.arn and ":assumed-role/" in ident.arn:
        parts = ident.arn.split(":assumed-role/", 1)[1].split("/", 1)
        if len(parts) == 2 and parts[1]:
            return parts[1]
    if ident.principal_id and ":" in ident.principal_id:
        return ident.principal_id.split(":", 1)[1] or None
    return None


# --- who set a tag, as far as CloudTrail proves it -------------------------------------------------------------------

#: The ``userIdentity`` field an :class:`Author` names the person by.
AuthorField = Literal["sourceIdentity", "principalId", "arn", "service", "none"]
_SERVICE_LINKED = ":role/aws-service-role/"


@dataclass(frozen=True)
class Author:
    """Who made a tagging call, named only by what the caller could not choose.

    An assumed-role session's name (``RoleSessionName``) is the caller's choice: ``aws sts assume-role
    --role-session-name alice`` makes anyone who may assume the role look like alice in the ARN. So a session is
    named by its ``sourceIdentity`` when the session carries one (set by the identity provider or the first
    ``AssumeRole``; a session cannot change it, and it survives role chaining), else by its role and ``principalId``
    (the role's unique id, which IAM assigns, then the session name, shown as what it is). IAM users and root are
    named by their ARN (IAM's, not the caller's), with the ``principalId`` kept beside it. A call an AWS service made
    through its service-linked role (Auto Scaling launching from a group's template) names no person at all:
    ``proven`` is False, and the governor honours nothing such a call set that would hold it back.
    """

    who: str
    via: AuthorField
    principal_id: str | None = None
    source_identity: str | None = None
    proven: bool = True

    def fields(self) -> dict[str, Any]:
        """What the ledger keeps beside ``who``: the field used and the raw ids."""
        return {
            "via": self.via,
            "principal_id": self.principal_id,
            "source_identity": self.source_identity,
            "proven": self.proven,
        }


def author(identity: UserIdentity | Mapping[str, Any]) -> Author:
    """The :class:`Author` of a CloudTrail call (see the class for the rule)."""
    ident = identity if isinstance(identity, UserIdentity) else UserIdentity.model_validate(dict(identity))
    context = ident.session_context or {}
    issuer_arn = _text((context.get("sessionIssuer") or {}).get("arn"))
    principal = _text(ident.principal_id)
    source = _text(context.get("sourceIdentity"))
    if ident.type == "AWSService" or (issuer_arn and _SERVICE_LINKED in issuer_arn):
        return _service(ident, issuer_arn, principal, source)
    if source:
        through = issuer_arn or ident.arn
        return Author(f"{source} (source identity, through {through})", "sourceIdentity", principal, source)
    if issuer_arn and principal:
        return Author(f"{issuer_arn} (principalId {principal})", "principalId", principal)
    if ident.arn:
        return Author(ident.arn, "arn", principal)
    if principal:
        return Author(principal, "principalId", principal)
    return Author(UNKNOWN, "none", proven=False)


def _service(ident: UserIdentity, issuer_arn: str | None, principal: str | None, source: str | None) -> Author:
    """A call an AWS service made itself or through its service-linked role: it names no person."""
    service = _text((ident.model_extra or {}).get("invokedBy"))
    named = issuer_arn or ident.arn or service or "an AWS service"
    by = f" ({service})" if service and service != named else ""
    return Author(f"{named}{by}", "service", principal, source, proven=False)


def _text(value: Any) -> str | None:
    return str(value) if value else None
