"""What the operator tools (producer, frontend, audit, local, deploy) share.

One argument parser whose misuse is one line (`toolkit.cli`), one way of finding the
deployed pipeline (`toolkit.pipeline`), and one way of reading the producer's ledger and
comparing node totals (`toolkit.ledger`), one way of showing untrusted text (`toolkit.untrusted`),
and one Host-header allowlist for the local servers (`toolkit.hosts`). Nothing here imports the pipeline's code
(`lambdas/`): the producer's ground truth must stay independent of what it checks.
"""
