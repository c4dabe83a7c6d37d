"""The scheduler service: the only writer of placements (runscheduler)."""
