"""The only modules that talk to AWS or Slack."""
