"""The embedded AWS emulator: moto in server mode, made to behave as AWS documents.

- `control`: start, attach to and stop the server process; `advance_clock` and the health check
- `__main__`: the server itself (``python -m local.emulator serve``)
- `moto_compat`: each place moto deviates from AWS's documented behaviour, corrected and tested
- `injected_faults`: AWS-side failures on request (lost responses, throttling, kept tokens)
"""
