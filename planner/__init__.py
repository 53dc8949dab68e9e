"""The capacity model and its dated price table, shared by the CDK app and the benchmarks.

Standard library only: `cdk synth` runs the model to refuse settings that cannot carry
the declared target rate (`stacks/capacity.py`), and `python -m benchmarks.capacity`
prints the same model's plan and costs.
"""
