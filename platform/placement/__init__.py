"""Zico's pure scheduling core: memory curves, group evaluation, time shifts, gating,
placement policies and the simulator. Imports numpy only — never Django, Celery or torch."""
