"""The demo's capture endpoint answers Slack's Web API for the bot token the way Slack does, so the demo runs the
governor's real users.lookupByEmail / users.info code (slack_sdk's WebClient) against it."""

from __future__ import annotations

from pathlib import Path

from governor.adapters.slack_app import SlackDirectory
from governor_cli.demo.capture import capture_endpoint, slack_api_to


def test_lookup_by_email_and_users_info_are_answered_from_the_demo_workspace(tmp_path: Path) -> None:
    with capture_endpoint(tmp_path) as capture, slack_api_to(capture):
        capture.directory["dara@demo.example"] = "UDEMODARA"
        directory = SlackDirectory("xoxb-demo-test")
        assert directory.user_id("Dara@demo.example".lower()) == "UDEMODARA"
        assert directory.user_id("nobody@demo.example") is None  # users_not_found
        assert directory.email("UDEMODARA") == "dara@demo.example"
        assert SlackDirectory("not-a-bot-token").user_id("dara@demo.example") is None  # not_authed
    assert capture.api_calls == [
        "users.lookupByEmail dara@demo.example",
        "users.lookupByEmail nobody@demo.example",
        "users.info UDEMODARA",
    ]
    assert capture.received == []  # Web API calls are not posts: they never count as messages
