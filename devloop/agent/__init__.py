"""The agent runtime: tools, flavors, the tool-use loop, stuck detection, checkpoints."""
