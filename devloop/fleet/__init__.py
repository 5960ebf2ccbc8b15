"""The fleet's logic, free of Celery: steps, decisions, release, reconciliation, status.

`workers/` turns these into Celery tasks; everything here is testable with Redis alone.
"""
