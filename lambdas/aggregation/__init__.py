"""The pipeline's domain logic: pure functions, no AWS calls, no third-party imports.

Every handler is a thin shell around these modules, so the rules that make the
totals exact (validation, versioning, delta arithmetic, batch identity and
transaction planning) can be read and tested without any cloud at all.
"""
