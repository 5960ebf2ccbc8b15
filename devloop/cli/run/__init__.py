"""`devloop run`: start the project's Redis, workers, Flower and console, watch the run
live, and end it with an exit code that says how it went."""
