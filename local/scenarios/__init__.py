"""End-to-end runs on the local runtime that prove exactness against the producer's ledger.

- `demo`: ``make demo``: up with faults, send, drain, verify, down
- `chaos`: ``make chaos``: every failure at once, figures, and a negative control that must be caught
"""
