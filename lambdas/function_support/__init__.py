"""What the three handlers share at their edge: settings, clients, fault injection."""
