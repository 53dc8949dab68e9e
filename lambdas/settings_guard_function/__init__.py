"""The settings guard: the custom resource handler that fails a deploy unsafe over stored state."""
