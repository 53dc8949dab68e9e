"""The state function: Kinesis → versioned conditional writes to the StateTable."""
