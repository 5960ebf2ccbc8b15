"""Run the harness's coder session in a process of its own (the resume test kills it)."""

from __future__ import annotations

import sys

from devloop.core.config import load_settings
from devloop.store import RedisStore
from tests.agent.harness import rig

if __name__ == "__main__":
    redis_url, base_url = sys.argv[1], sys.argv[2]
    harness = rig(RedisStore.from_url(redis_url), load_settings(), base_url)
    result = harness.session().run("Implement todo-be.")
    print(result.model_dump_json())
