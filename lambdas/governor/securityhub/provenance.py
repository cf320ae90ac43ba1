"""Where a finding on the bus came from: the export writes only findings the governor's own functions recorded.

The bus rule's source and account (``governor.events.findings``) are words in the event: whoever may invoke the
function directly can write them. What they cannot write is the ledger: every enforcer stages each finding in its
outbox (``governor.outbox``) before publishing it, under its deterministic id, with the text it publishes. A finding
is exported only if the outbox holds it, under its id, exactly as delivered, and it was not withdrawn; a forged
'fixed' finding, or a real one with its resource or verification changed, is refused (to the DLQ, with the reason).
"""

from __future__ import annotations

import json

from pydantic import ValidationError

from governor.domain.decision import Finding
from governor.domain.ports import Ledger
from governor.outbox import OUTBOX_KIND


def refusal(finding: Finding, ledger: Ledger) -> str | None:
    """Why ``finding`` is not the governor's own (None when the outbox holds it exactly as delivered)."""
    if not finding.id:
        return "the finding has no id: no governor function recorded it"
    item = ledger.get_item(OUTBOX_KIND, finding.id)
    if item is None:
        return f"finding {finding.id} is not in the governor's outbox: no governor function recorded it"
    if item.get("withdrawn_at"):
        return f"finding {finding.id} was withdrawn by the function that staged it"
    if item.get("pending"):
        return f"finding {finding.id} is still pending: its act is not confirmed"
    try:
        recorded = Finding.model_validate(json.loads(str(item.get("finding") or "")))
    except (ValueError, ValidationError):
        return f"finding {finding.id}: the outbox record is unreadable"
    if recorded != finding:
        changed = sorted(k for k in Finding.model_fields if getattr(recorded, k) != getattr(finding, k))
        return f"finding {finding.id} differs from what the governor recorded ({', '.join(changed)})"
    return None
