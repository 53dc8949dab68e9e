"""moto's own test suites run against moto with every patch of `local.emulator` applied (``make conformance``).

- `__main__`: the runner (``python -m local.conformance``): fetches moto's sdist at the pinned
  version by its SHA-256, runs its DynamoDB, DynamoDB Streams, Kinesis and S3 suites on plain moto
  and on patched moto, and fails on any test that passes on plain moto and not on ours unless
  docs/moto-upstream.md lists it with the AWS documentation our behaviour follows.
- `record`: a pytest plugin writing each test's outcome to a JSON file (both runs).
- `patched`: a pytest plugin installing `moto_compat` and `speedups` in the test process, as
  `local.emulator.__main__.serve` does in the emulator's.
"""
