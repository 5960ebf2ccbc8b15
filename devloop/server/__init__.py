"""The processes DevLoop runs itself: its own Redis server and its children."""
