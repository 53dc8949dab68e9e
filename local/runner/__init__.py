"""Running the deployed function code as Lambda does: stream pollers and execution environments.

- `discovery`: mappings and functions as the emulated Lambda service (and the template) define them
- `pollers`: one thread per shard with Lambda's batching, retry, filter and checkpoint rules
- `invoker`: a function's pool of `execution_environment`s, one worker process per warm instance
- `filters`, `events`, `redelivery`, `checkpoints`, `stats`: the pieces those use
- `runner`: wires it together; `python -m local.runner` runs it in the background for `make up`
- `inprocess`: the same handlers called directly, without the runner (the tests and benchmarks)
"""
