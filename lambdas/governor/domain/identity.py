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
from typing import Any

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
