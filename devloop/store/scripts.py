"""The Lua scripts behind every read-check-write the store does atomically.

Redis runs a script without interleaving other commands, so each check and its write
happen as one step; redis-py's Script reloads a script the server forgot (a restart
empties the script cache).
"""

from __future__ import annotations

# A fenced write's first lines: KEYS[n] the step's lease, ARGV[m] its owner.
FENCE_CHECK = """
if KEYS[{key}] and redis.call('GET', KEYS[{key}]) ~= ARGV[{arg}] then
  return redis.error_reply('DEVLOOP_LEASE_LOST')
end
"""

# One line appended to a ledger's stream and, with the same id, to its unit's stream (a unit
# stream left ahead of it by hand takes a new id); a stream that was empty is indexed from its
# first entry on.  Placeholders: the KEYS index of the stream, the unit's stream (the stream
# itself when the line has no unit) and the ledger index; the ARGV index of the line and of
# the ledger's name.  Leaves the entry's id in `id`.
INDEXED_APPEND = """
local fresh = redis.call('XLEN', KEYS[{stream}]) == 0
local id = redis.call('XADD', KEYS[{stream}], '*', 'line', ARGV[{line}])
if KEYS[{unit_stream}] ~= KEYS[{stream}] then
  local copied = redis.pcall('XADD', KEYS[{unit_stream}], id, 'line', ARGV[{line}])
  if type(copied) == 'table' and copied.err then
    redis.call('XADD', KEYS[{unit_stream}], '*', 'line', ARGV[{line}])
  end
end
if fresh then
  redis.call('HSET', KEYS[{index}], ARGV[{ledger}], '1')
end
"""

# KEYS: files, meta, commits[, lease].  ARGV: marker, base_version, cap, owner, then
# (path, op, data)* with op "w" (write data) or "d" (delete).  With a lease, the commit
# lands only while owner holds it.  The marker check comes before the version check so a
# redelivered commit reads as a duplicate, not as a conflict.
COMMIT_FILES = FENCE_CHECK.format(key=4, arg=4) + """
local version = tonumber(redis.call('HGET', KEYS[2], 'version') or '0')
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then
  return {0, version, 'already committed'}
end
if version ~= tonumber(ARGV[2]) then
  return {0, version, 'version conflict'}
end
local sizes = {}
for _, path in ipairs(redis.call('HKEYS', KEYS[1])) do
  sizes[path] = redis.call('HSTRLEN', KEYS[1], path)
end
for i = 5, #ARGV, 3 do
  if ARGV[i + 1] == 'd' then sizes[ARGV[i]] = nil else sizes[ARGV[i]] = #ARGV[i + 2] end
end
local total = 0
for _, n in pairs(sizes) do total = total + n end
if total > tonumber(ARGV[3]) then
  return {0, version, 'too large', total}
end
for i = 5, #ARGV, 3 do
  if ARGV[i + 1] == 'd' then
    redis.call('HDEL', KEYS[1], ARGV[i])
  else
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 2])
  end
end
version = version + 1
redis.call('HSET', KEYS[2], 'version', version)
redis.call('HSET', KEYS[3], ARGV[1], version)
return {1, version}
"""

# KEYS: state, events, timeline, the unit's timeline, ledger index, follow-ups, steps[, lease].
# ARGV: expected status, expected attempt, new state JSON, unit, new status, new attempt,
# events maxlen, the loop's timeline line ('' for none), the timeline's ledger name, the
# follow-up JSON ('' for none), a step record's name ('' for none), its JSON[, owner].  A unit
# with no state yet counts as pending at attempt 0.  With a lease, the change lands only while
# owner holds it.  An applied change is also one entry of the project's live events, and what
# must never be apart from it lands in the same step: the loop's timeline line (as
# LEDGER_APPEND adds it), the follow-up still to do (`unit` -> JSON, replacing any earlier),
# and the step record (unless one is there).
CAS_STATE = FENCE_CHECK.format(key=8, arg=13) + """
local status, attempt = 'pending', 0
local current = redis.call('GET', KEYS[1])
if current then
  local state = cjson.decode(current)
  status, attempt = state['status'], tonumber(state['attempt'])
end
if status ~= ARGV[1] or attempt ~= tonumber(ARGV[2]) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[3])
local event = {'kind', 'state', 'unit', ARGV[4], 'status', ARGV[5], 'attempt', ARGV[6]}
if cjson.decode(ARGV[3])['scripted'] == true then
  table.insert(event, 'scripted')  -- as state_event has it: the console labels the unit
  table.insert(event, '1')
end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[7], '*', unpack(event))
if ARGV[8] ~= '' then
""" + INDEXED_APPEND.format(stream=3, unit_stream=4, index=5, line=8, ledger=9) + """
end
if ARGV[10] ~= '' then
  redis.call('HSET', KEYS[6], ARGV[4], ARGV[10])
end
if ARGV[11] ~= '' then
  redis.call('HSETNX', KEYS[7], ARGV[11], ARGV[12])
end
return 1
"""

# KEYS: follow-ups.  ARGV: unit, the follow-up JSON it should still hold, the new JSON ('' to
# drop it).  Replaces (or drops) the unit's follow-up only if it is still that one: a claim
# of an overdue follow-up, or its end, never undoes a newer transition's.
SWAP_FOLLOWUP = """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then
  return 0
end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
end
return 1
"""

# KEYS: events, then one state per unit.  ARGV: events maxlen, the new status, the unit
# that caused the change, then per unit (unit, expected status, expected attempt, new state
# JSON, new attempt).  As CAS_STATE for each unit; the units changed are told by ONE events
# entry (kind "cascade", `units` and their `attempts` space-separated), not one per unit,
# and returned.
CASCADE_STATES = """
local done, attempts = {}, {}
for i = 2, #KEYS do
  local a = 4 + (i - 2) * 5
  local status, attempt = 'pending', 0
  local current = redis.call('GET', KEYS[i])
  if current then
    local state = cjson.decode(current)
    status, attempt = state['status'], tonumber(state['attempt'])
  end
  if status == ARGV[a + 1] and attempt == tonumber(ARGV[a + 2]) then
    redis.call('SET', KEYS[i], ARGV[a + 3])
    table.insert(done, ARGV[a])
    table.insert(attempts, ARGV[a + 4])
  end
end
if #done > 0 then
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'kind', 'cascade',
             'status', ARGV[2], 'by', ARGV[3], 'units', table.concat(done, ' '),
             'attempts', table.concat(attempts, ' '))
end
return done
"""

# KEYS: lease.  ARGV: owner, ttl_ms.  Re-acquiring one's own lease extends it.
ACQUIRE_LEASE = """
local owner = redis.call('GET', KEYS[1])
if owner == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if owner then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

# KEYS: lease.  ARGV: owner, ttl_ms.
HEARTBEAT_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

# KEYS: lease.  ARGV: owner.
RELEASE_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# KEYS: the ledger's stream, the unit's stream of it (any key when no unit), bug units,
# ledger index[, lease].  ARGV: the line, its unit ('' for none), the bug id it opens ('' for
# none), the ledger's name[, owner].  The entry goes to the project's stream and, with the
# same id, to its unit's (a unit stream left ahead of it by hand takes a new id); a stream
# that was empty is indexed from its first entry on.  Returns the entry's id.
LEDGER_APPEND = FENCE_CHECK.format(key=5, arg=5) + INDEXED_APPEND.format(
    stream=1, unit_stream=2, index=4, line=1, ledger=4
) + """
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[3], ARGV[3], ARGV[2])
end
return id
"""
