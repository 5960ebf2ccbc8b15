"""The coder and tester roles: their tools, prompts, self-checks and outputs."""
