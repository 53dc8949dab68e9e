"""The map function: StateTable stream → one pre-aggregated delta item per batch."""
