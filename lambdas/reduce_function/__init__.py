"""The reduce function: DeltaTable stream → transactional, idempotent aggregate updates."""
