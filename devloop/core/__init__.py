"""The models and the pure decisions over them: no store, no Redis, no processes."""
