"""The governor's own event names: what one of its functions sends another (EventBridge ``source`` and
``detail-type``). They live apart from the capability that sends them, so a receiver checks a name without importing
the sender's package (the idle function accepts Stop now without loading the interactions code)."""

from __future__ import annotations

#: Events the interactions function puts or hands over after verifying a Slack click.
INTERACTIONS_SOURCE = "gpu-fleet-governor.interactions"
#: Stop now, handed to the idle function (asynchronous Invoke) once the click is verified and authorised.
STOP_REQUESTED = "Stop Requested"
#: The ledger item a verified, authorised Stop now click leaves for the idle function, keyed by the click's id: the
#: idle function takes the instance, who asked and where to answer from it, never from the invocation.
STOP_REQUEST_KIND = "stop-request"
#: The ledger item the notifier leaves for the buttons of one message, keyed by their opaque token: what a click on
#: them may act on (the interactions function resolves every click through it; the idle function checks Stop now's).
BUTTON_KIND = "slack-button"
#: The Stop now button's Slack ``action_id``.
STOP_NOW_ACTION = "governor_stop_now"
