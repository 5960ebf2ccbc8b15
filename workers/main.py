"""The `devloop` console script: the command line with the Celery task queue installed."""

from __future__ import annotations

from devloop.cli.app import run_cli
from workers.queue import CeleryQueue


def main() -> None:
    """Console-script entry point."""
    run_cli(CeleryQueue())


if __name__ == "__main__":
    main()
