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


def test_chat_post_message_and_update_are_answered_like_slack_and_only_posts_count(tmp_path: Path) -> None:
    """Issue 48: the demo's capture answers the bot token's chat.postMessage (a new post, with its ts and channel)
    and chat.update (the message changed in place, counted apart, never a post), so the demo can run the bot mode."""
    import pytest

    from governor.adapters.slack import MessageGone, SlackBot
    from governor_cli.demo.capture import UPDATES, channel_of

    with capture_endpoint(tmp_path) as capture, slack_api_to(capture):
        bot = SlackBot("xoxb-demo-test")
        ts = bot.post("C0DEMO", {"text": "i-0abc would be stopped at 14:00", "blocks": []})
        assert ts and bot.update("C0DEMO", ts, {"text": "i-0abc is busy again: warning withdrawn"}) == ts
        with pytest.raises(MessageGone):
            bot.update("C0DEMO", "1.000000", {"text": "no such message"})
    channels = [channel_of(path) for path in capture.paths]
    assert channels == ["bot:C0DEMO", UPDATES]  # one post on the channel, one change in place
    assert capture.posted[ts]["text"] == "i-0abc is busy again: warning withdrawn"
