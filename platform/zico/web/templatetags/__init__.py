"""Template tags of the web UI."""
