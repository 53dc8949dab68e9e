"""Local runtime: the embedded AWS emulator, its compatibility fixes, the deployer and the runner."""
