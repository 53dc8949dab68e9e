"""Helpers around `cdk deploy` into a real account: `python -m deploy preflight` (README, "Deploy to AWS")."""
