"""CDK only: stacks compose constructs; constructs hold one capability each. No Lambda code here."""
