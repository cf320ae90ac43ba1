"""What the governor itself costs its users: the measured model of its invocations (``measured.py``, written by
``python -m governor_cli.cost.measure``), the us-east-1 price list it is priced with (``prices``), and the monthly
estimate for a fleet under a policy (``estimate``), shared by ``governor cost`` and the report's cost line.
"""
