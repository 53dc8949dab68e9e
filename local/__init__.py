"""The local runtime: the deployed stack run on one machine, with Lambda's event-source semantics.

- `emulator`: the embedded AWS emulator (moto in server mode) and its corrections
- `deploy`: the synthesized template deployed into it; ``make up`` / ``down`` / ``status``
- `runner`: stream pollers and execution environments running the deployed function code
- `scenarios`: ``make demo`` and ``make chaos``, proven exact against the producer's ledger
- `paths`: every file the runtime keeps under ``.local/``
"""
