"""The capacity model and its dated price table, shared by the CDK app and the benchmarks.

Pure (the standard library and the domain package `aggregation`, declared in
`pyproject.toml` with the packages under ``lambdas/``): `cdk synth`
runs the model to refuse settings that cannot carry the declared target rate
(`stacks/capacity.py`), and `python -m benchmarks.capacity` prints the same model's plan
and costs.
"""
