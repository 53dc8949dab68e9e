"""Archive function: each invocation's delta items in one write-once S3 object, with its receipt."""
