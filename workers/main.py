"""The `devloop` console script: the command line with the Celery task queue installed."""

from __future__ import annotations

from devloop.cli.commands import run_cli
from workers.celery_queue import CeleryQueue


def main() -> None:
    """Console-script entry point."""
    run_cli(CeleryQueue())


if __name__ == "__main__":
    main()
