"""One message per idle episode with the bot token: chat.postMessage keeps the ts, later findings about the same
instance update that message in place (chat.update) or reply in an owner's digest's thread; a message that is gone
(message_not_found, cant_update_message) gets a new post. Against a local HTTP server speaking Slack's Web API, with
slack_sdk's real WebClient."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from governor.adapters.slack import SlackBot
from governor.domain.decision import Finding
from governor.idle.digest import digest_warnings
from governor.notifier import handler as notifier
from governor.policy import PolicyError, parse_policy, parse_policy_text
from governor.runtime import Runtime
from governor_cli.testing.events import finding as finding_event
from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink
from tests.unit.test_notify_handler import FakeOutbox

NOW = dt.datetime(2026, 11, 20, 9, 0, tzinfo=dt.UTC)
CHANNEL = "C0GPUFLEET"


class FakeSlackApi:
    """chat.postMessage / chat.update as Slack answers them: ``{"ok": true, "ts": …}``, or HTTP 200 with
    ``{"ok": false, "error": "message_not_found"}`` for a ts it does not hold. Every call is recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.messages: dict[str, dict[str, Any]] = {}  # ts -> the message as the channel shows it
        self.refuse_updates: str | None = None
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                method = self.path.rsplit("/", 1)[-1]
                outer.calls.append((method, body))
                answer = outer.answer(method, body, self.headers.get("Authorization", ""))
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, method: str, body: dict[str, Any], auth: str) -> dict[str, Any]:
        if auth != "Bearer xoxb-test":
            return {"ok": False, "error": "invalid_auth"}
        if body.get("channel") != CHANNEL:
            return {"ok": False, "error": "channel_not_found"}
        if method == "chat.postMessage":
            ts = f"1763629200.{len(self.calls):06d}"
            if body.get("thread_ts"):
                if body["thread_ts"] not in self.messages:
                    return {"ok": False, "error": "thread_not_found"}
                self.messages[body["thread_ts"]].setdefault("replies", []).append(body)
            else:
                self.messages[ts] = dict(body)
            return {"ok": True, "channel": CHANNEL, "ts": ts}
        if method == "chat.update":
            if self.refuse_updates:
                return {"ok": False, "error": self.refuse_updates}
            if body.get("ts") not in self.messages:
                return {"ok": False, "error": "message_not_found"}
            self.messages[body["ts"]] = dict(body)
            return {"ok": True, "channel": CHANNEL, "ts": body["ts"]}
        return {"ok": False, "error": "unknown_method"}

    def top_level(self) -> list[dict[str, Any]]:
        return list(self.messages.values())


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSlackApi]:
    fake = FakeSlackApi()
    monkeypatch.setattr(notifier, "_bot", lambda region, secret: SlackBot("xoxb-test", base_url=fake.url))
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def _runtime(*, buttons: bool = False, **notifications: Any) -> Runtime:
    interactions: dict[str, Any] = {"bot_token_secret_name": "governor/slack-bot"}
    if buttons:
        interactions["buttons"] = True
    policy = parse_policy(
        {
            "notifications": {"enforce": True, "immediate": "actionable", "slack_channel": CHANNEL, **notifications},
            "interactions": interactions,
        }
    )
    return Runtime(policy=policy, ledger=MemoryLedger(), sink=MemorySink(), dead_letters=MemoryDeadLetters())


def _idle(rule: str, instance: str, title: str, fid: str, owner: str = "ana@demo.example") -> Finding:
    return Finding(
        policy="idle",
        rule=rule,
        severity="warning",
        resource=instance,
        title=title,
        owner=owner,
        team="vision",
        event_id="sweep",
        id=fid,
        at=NOW,
        usd_per_hour=12.24,
        actions=[{"type": "warn", "enforced": True, "planned": "stop", "due": NOW.isoformat()}]
        if rule == "idle.warned"
        else [{"type": "stop", "enforced": True}],
        enforced=True,
    )


def _send(f: Finding, rt: Runtime, outbox: FakeOutbox | None = None) -> dict[str, Any]:
    event = finding_event(f.model_dump(mode="json"), event_id=f"e-{f.id}", time=NOW.isoformat())
    return notifier.handle(event, rt, outbox or FakeOutbox(), NOW)


def test_a_warning_then_its_stop_is_one_message_updated_in_place(api: FakeSlackApi) -> None:
    rt = _runtime()
    assert _send(_idle("idle.warned", "i-1", "Idle GPU instance i-1 will be stopped", "w1"), rt)["status"] == "sent"
    stopped = _idle("idle.acted", "i-1", "Idle GPU instance i-1 stopped", "s1")
    assert _send(stopped, rt)["status"] == "sent"
    assert [m for m, _ in api.calls] == ["chat.postMessage", "chat.update"]
    (message,) = api.top_level()  # one message in the channel for the whole episode
    assert "stopped" in message["text"] and "Updated in place" in json.dumps(message["blocks"])
    assert api.calls[1][1]["ts"] == api.calls[0][1].get("ts", api.calls[1][1]["ts"])
    record = rt.ledger.get_item(notifier.THREAD_KIND, "i-1")
    assert record and record["channel"] == CHANNEL and record["ts"] in api.messages


@pytest.mark.parametrize("refusal", ["message_not_found", "cant_update_message", "edit_window_closed"])
def test_an_update_slack_refuses_because_the_message_is_gone_becomes_a_new_post(
    api: FakeSlackApi, refusal: str
) -> None:
    rt = _runtime()
    _send(_idle("idle.warned", "i-1", "Idle GPU instance i-1 will be stopped", "w1"), rt)
    if refusal == "message_not_found":
        api.messages.clear()  # somebody deleted the warning
    else:
        api.refuse_updates = refusal
    result = _send(_idle("idle.acted", "i-1", "Idle GPU instance i-1 stopped", "s1"), rt)
    assert result["status"] == "sent"
    assert [m for m, _ in api.calls] == ["chat.postMessage", "chat.update", "chat.postMessage"]
    record = rt.ledger.get_item(notifier.THREAD_KIND, "i-1")
    assert record and record["ts"] == max(api.messages)  # the new post is the episode's message now


def test_an_outcome_about_an_instance_of_an_owners_digest_replies_in_the_digests_thread(api: FakeSlackApi) -> None:
    rt = _runtime()
    warnings = [_idle("idle.warned", f"i-{n}", f"Idle GPU instance i-{n} will be stopped", f"w{n}") for n in (1, 2)]
    published, _ = digest_warnings(warnings, "sweep")
    for f in published:
        _send(f, rt)
    assert [m for m, _ in api.calls] == ["chat.postMessage"]  # one digest for the owner
    _send(_idle("idle.acted", "i-2", "Idle GPU instance i-2 stopped", "s2"), rt)
    assert [m for m, _ in api.calls] == ["chat.postMessage", "chat.postMessage"]
    (digest,) = api.top_level()  # still one message in the channel; the stop is a reply in its thread
    assert len(digest["replies"]) == 1 and "i-2 stopped" in digest["replies"][0]["text"]
    assert api.calls[1][1]["thread_ts"] == rt.ledger.get_item(notifier.THREAD_KIND, "i-1")["ts"]  # type: ignore[index]


def test_a_new_episode_is_a_new_message_and_other_findings_never_update_one(api: FakeSlackApi) -> None:
    rt = _runtime(merge_window_minutes=0)  # a second episode's warning within the hour is not merged away
    _send(_idle("idle.warned", "i-1", "Idle GPU instance i-1 will be stopped", "w1"), rt)
    _send(_idle("idle.warned", "i-1", "Idle GPU instance i-1 will be stopped (again)", "w2"), rt)
    network = Finding(
        policy="network", rule="network.world-open", severity="critical", resource="i-1", title="x", at=NOW
    )
    _send(network, rt)
    assert [m for m, _ in api.calls] == ["chat.postMessage"] * 3
    assert len(api.top_level()) == 3


def test_without_a_channel_the_webhook_posts_as_before_and_nothing_is_threaded() -> None:
    policy = parse_policy({"notifications": {"enforce": True, "immediate": "actionable"}})
    rt = Runtime(policy=policy, ledger=MemoryLedger(), sink=MemorySink(), dead_letters=MemoryDeadLetters())
    outbox = FakeOutbox()
    _send(_idle("idle.warned", "i-1", "warned", "w1"), rt, outbox)
    _send(_idle("idle.acted", "i-1", "stopped", "s1"), rt, outbox)
    assert len(outbox.slack) == 2  # a webhook answers "ok", no ts: each is a new message
    assert rt.ledger.get_item(notifier.THREAD_KIND, "i-1") is None


def test_a_refused_token_parks_the_event_and_a_channel_needs_the_bot_token(api: FakeSlackApi) -> None:
    rt = _runtime(slack_channel="C0SOMEWHERE")
    result = _send(_idle("idle.warned", "i-1", "warned", "w1"), rt)
    assert result["status"] == "undeliverable" and "channel_not_found" in result["undeliverable"][0]
    with pytest.raises(PolicyError, match=r"notifications\.slack_channel.*interactions\.bot_token_secret_name"):
        parse_policy_text("notifications:\n  slack_channel: C0GPUFLEET\n", "governor.yaml")


def _resumed(instance: str, fid: str) -> Finding:
    """The sweep's finding for a warned instance judged busy again (rule idle.resumed, info)."""
    return Finding(
        policy="idle",
        rule="idle.resumed",
        severity="info",
        resource=instance,
        title=f"GPU instance {instance} (g5.xlarge) is busy again: idle warning withdrawn",
        detail="GPU utilisation reached 80.0% (threshold 5%); idle warning withdrawn: nothing will be done",
        owner="ana@demo.example",
        team="vision",
        event_id="sweep-2",
        id=fid,
        at=NOW + dt.timedelta(minutes=15),
    )


def _has_buttons(message: dict[str, Any]) -> bool:
    return any(block.get("type") == "actions" for block in message.get("blocks") or [])


def test_a_warning_withdrawn_because_the_instance_is_busy_again_is_updated_in_place_without_buttons(
    api: FakeSlackApi,
) -> None:
    rt = _runtime(buttons=True)
    _send(_idle("idle.warned", "i-1", "Idle GPU instance i-1 will be stopped", "w1"), rt)
    (warning,) = api.top_level()
    assert _has_buttons(warning)  # Keep 4 h / Keep until tomorrow / Stop now
    result = _send(_resumed("i-1", "r1"), rt)
    assert result == {"status": "withdrawn", "how": "updated"}
    assert [m for m, _ in api.calls] == ["chat.postMessage", "chat.update"]  # no new post
    (message,) = api.top_level()
    assert "busy again: idle warning withdrawn" in message["text"] and not _has_buttons(message)
    assert "Updated in place: this was the idle warning posted" in json.dumps(message["blocks"])
    decisions = [d for _, d in rt.ledger.decisions if d.resource == "i-1"]  # type: ignore[attr-defined]
    assert decisions[-1].rule == "notifications.withdraw" and "updated in place" in decisions[-1].reasons[0]
    # The same finding again (a replay, an outbox re-publication) changes nothing; the episode is closed, so a later
    # finding about the instance is a message of its own, never an edit of the withdrawn warning.
    assert _send(_resumed("i-1", "r1"), rt)["status"] != "withdrawn"
    _send(_idle("idle.acted", "i-1", "Idle GPU instance i-1 stopped", "s1"), rt)
    assert [m for m, _ in api.calls] == ["chat.postMessage", "chat.update", "chat.postMessage"]


def test_a_withdrawn_warning_of_an_owners_digest_is_a_reply_in_its_thread(api: FakeSlackApi) -> None:
    rt = _runtime()
    warnings = [_idle("idle.warned", f"i-{n}", f"Idle GPU instance i-{n} will be stopped", f"w{n}") for n in (1, 2)]
    published, _ = digest_warnings(warnings, "sweep")
    for f in published:
        _send(f, rt)
    assert _send(_resumed("i-2", "r2"), rt) == {"status": "withdrawn", "how": "replied"}
    (digest,) = api.top_level()  # the other instance's row and buttons are left as they are
    assert [m for m, _ in api.calls] == ["chat.postMessage", "chat.postMessage"]
    assert len(digest["replies"]) == 1 and "i-2" in digest["replies"][0]["text"]


@pytest.mark.parametrize("immediate", ["actionable", "all"])
def test_a_withdrawn_warning_never_posts_a_new_message(api: FakeSlackApi, immediate: str) -> None:
    """With a webhook (no ts to update) it waits for the daily report digest; so it does with the bot when no message
    of the episode is kept (the warning went out before slack_channel was set), whatever ``immediate`` says."""
    policy = parse_policy({"notifications": {"enforce": True, "immediate": immediate}})
    rt = Runtime(policy=policy, ledger=MemoryLedger(), sink=MemorySink(), dead_letters=MemoryDeadLetters())
    outbox = FakeOutbox()
    _send(_idle("idle.warned", "i-1", "warned", "w1"), rt, outbox)
    result = _send(_resumed("i-1", "r1"), rt, outbox)
    assert result["status"] == "digest" and "webhook's message cannot be edited" in result["reason"]
    assert len(outbox.slack) == 1  # the warning only
    bot = _runtime(immediate=immediate)
    assert _send(_resumed("i-9", "r9"), bot)["status"] == "digest"
    assert api.calls == []
    decisions = [d for _, d in bot.ledger.decisions]  # type: ignore[attr-defined]
    assert decisions[-1].rule == "notifications.digest" and "no message of this episode" in decisions[-1].reasons[0]
