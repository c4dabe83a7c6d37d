"""Live memory telemetry: Redis keys, control consumer and stored timelines."""
