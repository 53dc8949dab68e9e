"""The event-source runner: Lambda's stream pollers and execution environments, locally.

- `discovery`: mappings and functions as the emulated Lambda service (and the template) define them
- `pollers`: one thread per shard with Lambda's batching, retry, filter and checkpoint rules
- `invoker`: a function's pool of execution environments (`local.execution_environment`)
- `filters`, `events`, `checkpoints`, `stats`: the pieces those use
- `runner`: wires it together; `python -m local.runner` runs it in the background for `make up`
"""
