"""Layered projects for bench/scale.py, and their Redis filled the way a finished run leaves it.

A seed project of six units runs for real (`devloop run --llm stub` on a Redis of ours);
what that run left for one of its units that has a dependency (state, step records, files,
transcripts, progress, spend, agent state, output streams, ledger lines) is then copied to
every unit of a big project, ids replaced and times spread as `workers` workers would have
run the units one after another. (A leading underscore keeps bench/run_all.py from running it.)
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
import yaml

from devloop.server.redis_server import RedisServer

COMPANY, PID = "c-scale", "p-scale"
LAYER = 50  # units a layer; each depends on 1-3 units of the layer before
DEVLOOP = str(Path(sys.executable).parent / "devloop")
SEED_UNITS, SEED_LAYER, TEMPLATE = 6, 3, "u00004"  # u00004 depends on a unit of layer 1
PREFIX = f"devloop:{PID}:".encode()
# Epoch seconds (2020-2033) and ISO timestamps inside values, moved with the unit.
_EPOCH = re.compile(rb"\b1[6-9]\d{8}\.\d+")
_ISO = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z")


def unit_id(i: int) -> str:
    return f"u{i:05d}"


def layered_spec(n: int, layer: int = LAYER, seed: int = 27) -> dict[str, Any]:
    """n python units in layers of `layer`, each depending on 1-3 of the layer before."""
    rng = random.Random(seed)
    units = []
    for i in range(n):
        uid = unit_id(i)
        unit: dict[str, Any] = {
            "id": uid, "kind": "lib",
            "exports": {"module": {f"code/{uid}.py": {"value()": "-> int"}}},
            "acceptance": [f"value() returns an integer for {uid}"],
        }
        if i >= layer:
            before = list(range((i // layer - 1) * layer, (i // layer) * layer))
            picked = rng.sample(before, min(len(before), rng.randint(1, 3)))
            unit["depends_on"] = [unit_id(j) for j in sorted(picked)]
        units.append(unit)
    return {"company_id": COMPANY, "project_id": PID, "stack": "python", "units": units}


def write_spec(path: Path, n: int, layer: int = LAYER) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(layered_spec(n, layer), sort_keys=False))
    return path


def seed_run(work: Path) -> RedisServer:
    """A real stub run of the seed project on a Redis of ours (the caller closes it)."""
    project = work / "seed"
    spec = write_spec(work / "seed.yaml", SEED_UNITS, SEED_LAYER)
    subprocess.run([DEVLOOP, "new", str(project), "--from", str(spec), "--force"], check=True,
                   capture_output=True)
    server = RedisServer(work / "seed-redis")
    env = {**os.environ, "DEVLOOP_REDIS_URL": server.url}
    done = subprocess.run([DEVLOOP, "run", str(project), "--llm", "stub", "--workers", "2"],
                          env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        server.close()
        raise RuntimeError(f"the seed run failed ({done.returncode}): {done.stderr[-2000:]}")
    return server


class Template:
    """What the seed run left for TEMPLATE: keys, project hash fields and ledger lines."""

    def __init__(self, seed: redis.Redis) -> None:
        mine = TEMPLATE.encode()
        self.keys: dict[bytes, tuple[bytes, Any]] = {}
        for key in seed.scan_iter(match=PREFIX + b"*"):
            kind = seed.type(key)
            if mine not in key[len(PREFIX):]:
                continue
            if kind == b"string":
                self.keys[key] = (kind, seed.get(key))
            elif kind == b"hash":
                self.keys[key] = (kind, seed.hgetall(key))
            elif kind == b"set":
                self.keys[key] = (kind, seed.smembers(key))
            elif kind == b"list":
                self.keys[key] = (kind, seed.lrange(key, 0, -1))
            elif kind == b"stream":
                self.keys[key] = (kind, [f for _, f in seed.xrange(key)])
        # Fields of the project's hashes that are this unit's (spend, progress, agent-state).
        self.fields = {
            h: {f: v for f, v in seed.hgetall(PREFIX + h).items() if mine in f}
            for h in (b"spend", b"progress", b"agent-state")
        }
        self.ledgers = {
            s: [f for _, f in seed.xrange(PREFIX + s) if mine in b"".join(f.values())]
            for s in (b"stream:timeline", b"stream:events")
        }
        self.llm = seed.get(PREFIX + b"llm")
        steps = seed.hgetall(PREFIX + b"unit:" + mine + b":steps").values()
        spans = [_span(v) for v in steps]
        self.span_s = sum(spans) or 10.0  # what one unit held its worker(s), in total


def _span(record: bytes) -> float:
    found = [float(x) for x in re.findall(rb'"(?:started_at|ended_at)":(\d+\.\d+)', record)]
    return max(found) - min(found) if len(found) >= 2 else 0.0


def _moved(value: bytes, old: bytes, new: bytes, dt: float) -> bytes:
    value = value.replace(old, new)
    if dt:
        value = _EPOCH.sub(lambda m: repr(float(m.group()) + dt).encode(), value)
        value = _ISO.sub(lambda m: _iso_plus(m.group(), dt), value)
    return value


def _iso_plus(stamp: bytes, dt: float) -> bytes:
    from datetime import datetime, timedelta

    text = stamp.decode().rstrip("Z")
    moved = datetime.fromisoformat(text) + timedelta(seconds=dt)
    return (moved.isoformat(timespec="seconds") + "Z").encode()


def fill(client: redis.Redis, template: Template, spec: dict[str, Any], workers: int = 3,
         progress: Callable[[int], None] | None = None) -> None:
    """Every unit of spec as TEMPLATE was left, one after another on `workers` workers."""
    old = TEMPLATE.encode()
    spend = 0
    for i, unit in enumerate(spec["units"]):
        new = unit["id"].encode()
        dt = (i // workers) * template.span_s
        deps = [d.encode() for d in unit.get("depends_on", [])]
        with client.pipeline(transaction=False) as pipe:
            for key, (kind, value) in template.keys.items():
                target = key.replace(old, new)
                if kind == b"string":
                    pipe.set(target, _moved(value, old, new, dt) if not key.endswith(
                        b":dispatched") else (deps[0] if deps else b""))
                elif kind == b"hash":
                    fields = {f.replace(old, new): _moved(v, old, new, dt)
                              for f, v in value.items() if f != b"spec.json"}
                    if fields:
                        pipe.hset(target, mapping=fields)
                elif kind == b"set" and key.endswith(b":finished"):
                    if deps:
                        pipe.sadd(target, *deps)
                elif kind == b"list":
                    pipe.rpush(target, *[_moved(v, old, new, dt) for v in value])
                elif kind == b"stream":
                    for fields in value:
                        pipe.xadd(target, {k: v.replace(old, new) for k, v in fields.items()})
            for h, fields in template.fields.items():
                for f, v in fields.items():
                    pipe.hset(PREFIX + h, f.replace(old, new), _moved(v, old, new, dt))
                    if h == b"spend":
                        spend += int(v)
            for stream, entries in template.ledgers.items():
                for fields in entries:
                    moved = {k: _moved(v, old, new, dt) for k, v in fields.items()}
                    pipe.xadd(PREFIX + stream, moved, maxlen=10_000 if b"events" in stream
                              else None, approximate=True)
            pipe.execute()
        if progress is not None and i % 1000 == 999:
            progress(i + 1)
    client.hset(PREFIX + b"spend", mapping={b"total": spend, b"scripted": spend})
    if template.llm:
        client.set(PREFIX + b"llm", template.llm)
