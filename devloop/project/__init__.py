"""A project folder: loading and checking it, its stacks, its views' files, how it was last run."""
