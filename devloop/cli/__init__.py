"""The `devloop` command line: commands.py assembles the groups; run/ is `devloop run`'s
supervision (its workers, Flower, console and live view)."""
