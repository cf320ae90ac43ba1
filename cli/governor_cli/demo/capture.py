"""A local stand-in for Slack's incoming webhook: a loopback HTTP endpoint that saves every message it is sent.

The demo stores its URL in the emulated Secrets Manager under the policy's webhook secret name, so the notifier finds
it, posts to it and retries exactly as it would against ``hooks.slack.com``. It answers like Slack does (``200 ok``,
``400 invalid_payload`` for a body that is not a JSON object), and it lives only as long as the demo.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

MAX_BODY = 1_000_000  # Slack refuses far smaller payloads; anything bigger is a bug in the sender


@dataclass
class CaptureEndpoint:
    """Where messages go (``url``), and what arrived: each saved as ``<folder>/NNNN.json`` in arrival order."""

    url: str
    folder: Path
    received: list[dict[str, Any]] = field(default_factory=list)
    #: The path each message was posted to, in the same order: the webhook secret's channel, or a click's answer.
    paths: list[str] = field(default_factory=list)
    rejected: int = 0
    #: Slack's Web API directory as the demo's workspace holds it (email -> user id): ``users.lookupByEmail`` and
    #: ``users.info`` with the bot token are answered from it.
    directory: dict[str, str] = field(default_factory=dict)
    #: Every Web API call the governor made (``users.lookupByEmail email``), in order.
    api_calls: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    #: Messages posted with the bot token, by ``ts`` (``chat.postMessage``), so ``chat.update`` finds them.
    posted: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: ``chat.update`` calls: a message changed in place, never a new post.
    updates: int = 0

    def chat(self, method: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """``chat.postMessage`` (a new post on the channel: kept and counted, answered with its ``ts``) and
        ``chat.update`` (the message at ``ts`` replaced in place: saved, counted apart), answered as Slack does."""
        channel = str(arguments.get("channel") or "")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        message = {k: v for k, v in arguments.items() if k in ("text", "blocks", "thread_ts")}
        with self._lock:
            self.api_calls.append(f"{method} {channel}")
        if method == "chat.update":
            ts = str(arguments.get("ts") or "")
            if ts not in self.posted:
                return {"ok": False, "error": "message_not_found"}
            self.posted[ts] = message
            self.keep({**message, "ts": ts, "updated": True}, f"{UPDATES_PATH}{channel}")
            return {"ok": True, "channel": channel, "ts": ts, "text": message.get("text", "")}
        with self._lock:
            ts = f"{1_700_000_000 + len(self.posted)}.{len(self.posted):06d}"
            self.posted[ts] = message
        self.keep({**message, "ts": ts}, f"/services/demo/{BOT_PREFIX}{channel}")
        return {"ok": True, "channel": channel, "ts": ts, "message": message}

    def keep(self, message: dict[str, Any], posted_to: str = "") -> Path:
        with self._lock:
            self.received.append(message)
            self.paths.append(posted_to)
            path = self.folder / f"{len(self.received):04d}.json"
        path.write_text(json.dumps(message, indent=2), encoding="utf-8")
        return path


def _handler(endpoint: CaptureEndpoint) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path.startswith("/api/"):
                self.do_GET()
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(min(length, MAX_BODY))
            try:
                message = json.loads(body)
            except ValueError:
                message = None
            if not isinstance(message, dict) or length > MAX_BODY:
                endpoint.rejected += 1
                self._answer(400, b"invalid_payload")
                return
            endpoint.keep(message, self.path)
            self._answer(200, b"ok")

        def do_GET(self) -> None:
            """Slack's Web API reads (``users.lookupByEmail``, ``users.info``; arguments in the query string or a
            form body, as slack_sdk sends them), answered the way Slack does: HTTP 200 with
            ``{"ok": false, "error": …}`` for a failure."""
            parts = urlsplit(self.path)
            method = parts.path.removeprefix("/api/")
            length = int(self.headers.get("Content-Length") or 0)
            form = self.rfile.read(min(length, MAX_BODY)).decode(errors="replace") if length else ""
            body = _json_object(form) if "json" in self.headers.get("Content-Type", "") else None
            query = {k: v[0] for k, v in parse_qs(f"{parts.query}&{form if body is None else ''}").items()}
            answer: dict[str, Any]
            if not self.headers.get("Authorization", "").startswith("Bearer xoxb-"):
                answer = {"ok": False, "error": "not_authed"}
            elif method in ("chat.postMessage", "chat.update"):
                answer = endpoint.chat(method, body if body is not None else dict(query))
            elif method == "users.lookupByEmail":
                email = query.get("email", "").lower()
                with endpoint._lock:
                    endpoint.api_calls.append(f"{method} {email}")
                user = endpoint.directory.get(email)
                answer = (
                    {"ok": True, "user": {"id": user, "deleted": False, "profile": {"email": email}}}
                    if user
                    else {"ok": False, "error": "users_not_found"}
                )
            elif method == "users.info":
                user = query.get("user", "")
                with endpoint._lock:
                    endpoint.api_calls.append(f"{method} {user}")
                emails = [e for e, u in endpoint.directory.items() if u == user]
                answer = (
                    {"ok": True, "user": {"id": user, "deleted": False, "profile": {"email": emails[0]}}}
                    if emails
                    else {"ok": False, "error": "user_not_found"}
                )
            else:
                answer = {"ok": False, "error": "unknown_method"}
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _answer(self, status: int, text: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the saved files are the record, not an access log on the demo's terminal."""

    return Handler


@contextmanager
def capture_endpoint(folder: Path, host: str = "127.0.0.1") -> Iterator[CaptureEndpoint]:
    """Serve on a free loopback port for the duration of the block; the folder is emptied of an earlier run first."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.json"):
        old.unlink()
    endpoint = CaptureEndpoint(url="", folder=folder)
    server = ThreadingHTTPServer((host, 0), _handler(endpoint))
    endpoint.url = f"http://{host}:{server.server_address[1]}/services/demo"
    thread = threading.Thread(target=server.serve_forever, name="slack-capture", daemon=True)
    thread.start()
    try:
        yield endpoint
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


#: Where the capture files a bot post's channel (``bot:C…``) and its updates in place (never a new post).
BOT_PREFIX = "bot:"
UPDATES_PATH = "/updates/"
#: The pseudo-channel of ``chat.update`` calls: the episode's message changed in place, nobody gets a new post.
UPDATES = "updates in place (chat.update)"


def channel_of(path: str) -> str:
    """The channel a message went to: the webhook secret's name (the demo gives each secret its own path under
    ``/services/demo/``), a bot channel (``bot:C…``), or the in-place changes: answers to clicks (``response_url``)
    and ``chat.update``, which replace a message, not a post."""
    if path.startswith("/actions/"):
        return CLICK_ANSWERS
    if path.startswith(UPDATES_PATH):
        return UPDATES
    return path.removeprefix("/services/demo").strip("/") or "webhook"


#: The pseudo-channel of answers to clicks: Slack replaces the clicked message with them, nobody gets a new post.
CLICK_ANSWERS = "click answers (replace the clicked message)"

#: Where Slack answers a click (``response_url``); the governor posts there only (``check_response_url``).
SLACK_ACTIONS = "https://hooks.slack.com/actions/"


#: slack_sdk's WebClient default: Slack's Web API.
SLACK_API = "https://slack.com/api/"


@contextmanager
def slack_api_to(endpoint: CaptureEndpoint) -> Iterator[None]:
    """While active, slack_sdk's WebClient (the bot token's ``users.lookupByEmail`` and ``users.info``) calls the
    capture endpoint's ``/api/`` instead of slack.com: the governor's code and settings are unchanged, only the
    third-party transport's default address is, as :func:`slack_answers_to` does for ``response_url``."""
    from slack_sdk.web import base_client

    original = base_client.BaseClient.__init__
    api = endpoint.url.rsplit("/services/", 1)[0] + "/api/"

    def redirected(self: Any, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("base_url", SLACK_API) == SLACK_API and len(args) < 2:
            kwargs["base_url"] = api
        original(self, *args, **kwargs)

    base_client.BaseClient.__init__ = redirected  # type: ignore[method-assign]
    try:
        yield
    finally:
        base_client.BaseClient.__init__ = original  # type: ignore[method-assign]


@contextmanager
def slack_answers_to(endpoint: CaptureEndpoint) -> Iterator[None]:
    """The demo's clicks carry ``response_url``s on Slack's own host, which the governor insists on, as in production;
    while active, the webhook client ``slack_sdk`` gives the governor posts those to the capture endpoint instead.

    The tooling changes the transport (a third-party class), never a setting of the governor's runtime.
    """
    from slack_sdk.webhook import client as webhook

    original = webhook.WebhookClient.__init__
    base = endpoint.url.rsplit("/services/", 1)[0]

    def redirected(self: Any, url: str, *args: Any, **kwargs: Any) -> None:
        if url.startswith(SLACK_ACTIONS):
            url = f"{base}/actions/{url.removeprefix(SLACK_ACTIONS)}"
        original(self, url, *args, **kwargs)

    webhook.WebhookClient.__init__ = redirected  # type: ignore[method-assign]
    try:
        yield
    finally:
        webhook.WebhookClient.__init__ = original  # type: ignore[method-assign]
