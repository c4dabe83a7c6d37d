"""Training jobs, their status machine, memory profiles and events."""
