"""Security Hub export: every governor finding as an OCSF Detection Finding, and (``securityhub.asff``) in Security Hub
through BatchImportFindings."""
