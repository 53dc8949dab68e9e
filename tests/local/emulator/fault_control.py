"""Client of an emulator's injected faults, for the fault fixtures of the suite."""

from typing import Any

from local.emulator.injected_faults import clear_faults, configure_faults, fault_report, injected


class FaultControl:
    """The module emulator's injected faults (``/_compat/faults``, `local.emulator.injected_faults`)."""

    def __init__(self, endpoint_url: str) -> None:
        self.endpoint_url = endpoint_url

    def configure(self, *rules: dict[str, Any], seed: int = 0) -> dict[str, Any]:
        """Replace the faults by `rules` (counters reset); returns the report."""
        return configure_faults(self.endpoint_url, {"seed": seed, "rules": list(rules)})

    def report(self) -> dict[str, Any]:
        return fault_report(self.endpoint_url)

    def injected(self, kind: str, service: str, operation: str) -> int:
        """Faults of `kind` injected so far on ``service:operation``."""
        return injected(self.report(), kind, service, operation)

    def clear(self) -> dict[str, Any]:
        """No faults any more; returns the report as it was."""
        return clear_faults(self.endpoint_url)
