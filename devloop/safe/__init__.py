"""The one safe door to the file system: no link followed, nothing outside reached."""
