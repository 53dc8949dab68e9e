"""Archive function: every delta item written once to S3, counted once in the registry."""
