"""The local runtime's lifecycle: the synthesized template deployed into the emulator, up and down.

- `deployer`: `cdk synth`'s template and assets into the emulator's CloudFormation, and what it skips
- `lifecycle`: ``make up`` / ``make down`` (emulator, deployment, runner; idempotent)
- `status`: ``make status``, read from the files the runner writes
"""
