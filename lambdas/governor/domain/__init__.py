"""Pure decisions. Nothing here imports boto3 or reads the environment; see ``ports`` for what it needs."""
