"""The app a worker or Flower serves: `celery -A workers.worker_app worker|flower`.

Celery finds an app as a module attribute, so this module makes one, from DEVLOOP_*
settings, when the worker imports it (or the fork server a run's workers are forked from,
workers/forker.py).
"""

from __future__ import annotations

from workers.app import make_app

app = make_app()
