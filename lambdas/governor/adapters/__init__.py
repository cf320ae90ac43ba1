"""AWS and Slack adapters the capabilities share (sessions, ledger, bus, DLQ, EC2, SSM, SES); each capability package
holds its own adapters beside its handler."""
