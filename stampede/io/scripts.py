"""Every Lua script of django-stampede, run by EVALSHA with NOSCRIPT recovery.

Rule: each script starts with a comment naming its KEYS, ARGV and return value.
Rule: a script touches only keys derived from one name by ``keys.py``, so on Redis Cluster
all of them share one hash slot.
Rule: no wake-up message is written in Lua. A script publishes what its caller passes, or a
kind from ``core/wakeup.py`` that ``run`` appends to its ARGV (``Script.kinds``): the kinds are
named once, and a test reads back what a real Redis publishes.

Scripts are not loaded up front: ``run`` tries ``EVALSHA`` and, when the server answers
``NOSCRIPT`` (first use, a restart, ``SCRIPT FLUSH``, a failover to a fresh replica), falls back
to ``EVAL``, which also caches the script for the next ``EVALSHA``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import NoScriptError, RedisClusterException

from ..core import wakeup
from . import clients, cluster_pubsub


@dataclass(frozen=True)
class Script:
    """A Lua script and its SHA1, computed locally so no round trip is spent on SCRIPT LOAD."""

    name: str
    text: str
    sha: str = field(init=False)
    #: The script publishes a wake-up with the command named by one more ARGV, after its own:
    #: ``run`` passes ``PUBLISH``, or ``SPUBLISH`` on a cluster that has it
    #: (``publish_command``).
    publishes: bool = False
    #: Wake-up kinds (``core.wakeup``) the script publishes on its own account, not its
    #: caller's: ``run`` passes them as the ARGV after the publish command, in this order.
    kinds: tuple[bytes, ...] = ()

    def __post_init__(self) -> None:
        if self.kinds and not self.publishes:
            raise ValueError(f"script {self.name!r} has wake-up kinds but publishes nothing")
        object.__setattr__(self, "sha", hashlib.sha1(self.text.encode()).hexdigest())


ACQUIRE = Script(
    "acquire",
    """
-- KEYS[1] lock key, KEYS[2] fence key
-- ARGV[1] token, ARGV[2] ttl in ms, ARGV[3] "1" to issue a fencing token, "0" not to
-- returns {1, fencing token (0 when not issued)} when acquired,
--         {0, remaining ttl of the current holder in ms} when not
-- The fencing token is max(last + 1, server time in microseconds): strictly increasing while
-- the fence key lives (INCR), and still increasing after it expired or was evicted, because
-- time has moved on since the last token was issued. So the fence key needs no eternal life.
-- Cache fills skip it (three commands fewer per fill): their writes are checked against the
-- lock's token inside Redis instead.
-- A lock already held by this very token is won: a call resent after its reply was lost
-- (the client retries once on a broken connection) must not lose to itself.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
    or redis.call('GET', KEYS[1]) == ARGV[1] then
  if ARGV[3] == '0' then
    return {1, 0}
  end
  local last = tonumber(redis.call('GET', KEYS[2]) or '0')
  local now = redis.call('TIME')
  local fence = math.max(last + 1, tonumber(now[1]) * 1000000 + tonumber(now[2]))
  redis.call('SET', KEYS[2], string.format('%.0f', fence), 'PX', ARGV[2])
  return {1, fence}
end
return {0, redis.call('PTTL', KEYS[1])}
""",
)

ACQUIRE_READ = Script(
    "acquire_read",
    """
-- KEYS[1] lock key, KEYS[2] cache key, KEYS[3] its meta key, KEYS[4..] its tags' stamp keys
-- ARGV[1] token, ARGV[2] ttl in ms
-- returns {1, the cache key's value, its meta (each nil when absent), the server's time in
--          microseconds, then each stamp} when acquired, {0} when not
-- A fill's acquire: the winner learns in the same round trip whether the previous holder
-- stored a value between the winner's first read and this attempt, so it goes straight to
-- its loader when the key is still absent. A loser is not told the holder's TTL: it
-- subscribes and then looks at the lock anyway (a release in between would go unheard).
-- A lock already held by this very token is won (a resent call: see ACQUIRE).
-- The time is when the load begins, on the clock tag stamps are written with; a missing
-- stamp is created then ("0 0 <time>": never invalidated, created now), so that a stamp is
-- missing later only when it was evicted or deleted (core/tags.py).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
    or redis.call('GET', KEYS[1]) == ARGV[1] then
  local now = redis.call('TIME')
  local us = string.format('%.0f', tonumber(now[1]) * 1000000 + tonumber(now[2]))
  local found = {1, false, false, us}
  local values = redis.call('MGET', KEYS[2], KEYS[3])
  found[2], found[3] = values[1], values[2]
  for i = 4, #KEYS do
    redis.call('SET', KEYS[i], '0 0 ' .. us, 'NX')
    found[#found + 1] = redis.call('GET', KEYS[i])
  end
  return found
end
return {0}
""",
)

#: The write both commits share (``ttl`` is ARGV[4] in each): a key and its meta beside it are
#: set with one expiry, or deleted when there is nothing to hold.
_WRITE_PART = """local ttl = tonumber(ARGV[4])
local function write(key, present, data)
  if not present then
    redis.call('DEL', key)
  elseif ttl > 0 then
    redis.call('SET', key, data, 'PX', ttl)
  else
    redis.call('SET', key, data)
  end
end
"""

COMMIT = Script(
    "commit",
    """
-- KEYS[1] cache key, KEYS[2] lock key, KEYS[3] meta key
-- ARGV[1] token, [2] value, [3] meta, [4] ttl ms, [5] channel, [6] message, [7] flag, [8] has value
-- returns 1 when the lock was ours: the record is written, the lock released, the waiters
-- told; 0 when it was not (nothing is written or released)
-- ARGV[4] 0: no expiry, -1: no write; ARGV[8] "1" when there is a value, "0" when not (a
-- failure: its meta only). ``run`` appends ARGV[9] PUBLISH, or SPUBLISH on a cluster
-- (``Script.publishes``), and ARGV[10] the INVALIDATED message (``Script.kinds``).
-- The value and its meta are written together, with one expiry: an empty part is deleted, so
-- no meta of an earlier fill outlives this one. ARGV[7] "1" appends meta, newline and value
-- to the message: a small record travels inside the wake-up, so waiting processes need no GET.
-- The write belongs to the lock: a holder paused past its TTL must not overwrite the value a
-- later holder stored, and a delete() during the load (which deletes the lock) voids it.
local holder = redis.call('GET', KEYS[2])
if holder ~= ARGV[1] then
  if not holder then
    -- Nobody holds the lock (FLUSHALL, eviction, a force-release): the waiters would sleep
    -- out the TTL they last saw; INVALIDATED sends them to contend now, as delete() does.
    redis.call(ARGV[9], ARGV[5], ARGV[10])
  end
  return 0
end
"""
    + _WRITE_PART
    + """if ttl >= 0 then
  write(KEYS[1], ARGV[8] == '1', ARGV[2])
  write(KEYS[3], ARGV[3] ~= '', ARGV[3])
end
redis.call('DEL', KEYS[2])
if ARGV[7] == '1' then
  redis.call(ARGV[9], ARGV[5], ARGV[6] .. ARGV[3] .. '\\n' .. ARGV[2])
else
  redis.call(ARGV[9], ARGV[5], ARGV[6])
end
return 1
""",
    publishes=True,
    kinds=(wakeup.INVALIDATED,),
)

RELEASE = Script(
    "release",
    """
-- KEYS[1] lock key
-- ARGV[1] token, ARGV[2] wake-up channel, ARGV[3] wake-up message, ARGV[4] (S)PUBLISH
-- returns 1 when the lock was ours and is now released (and waiters were told), else 0
-- A lock that nobody holds any more (expired, flushed, force-released) is announced too: its
-- waiters would otherwise sleep out the TTL they last saw.
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call(ARGV[4], ARGV[2], ARGV[3])
  return 1
end
if not holder then
  redis.call(ARGV[4], ARGV[2], ARGV[3])
end
return 0
""",
    publishes=True,
)

EXTEND = Script(
    "extend",
    """
-- KEYS[1] lock key, KEYS[2] fence key
-- ARGV[1] token, ARGV[2] new ttl in ms
-- returns 1 when the lock was ours and now lives ARGV[2] ms more, else 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return 1
end
return 0
""",
)

FENCE_RAISE = Script(
    "fence_raise",
    """
-- KEYS[1] fence key
-- ARGV[1] fencing token T, ARGV[2] how long the fence key is kept at least, in ms
-- returns the fence key's value now: max(its value, T)
-- Redlock's second round: a holder's token is the largest its majority issued, and writing it
-- back to every server of that majority makes the next holder's INCR on any server of the
-- intersection (two majorities always share one) exceed it. The key outlives the hold
-- (ARGV[2]) so that the counter, not the server's clock, orders the next holders.
local fence = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), tonumber(ARGV[1]))
local keep = math.max(redis.call('PTTL', KEYS[1]), tonumber(ARGV[2]))
redis.call('SET', KEYS[1], string.format('%.0f', fence), 'PX', keep)
return fence
""",
)

STAMP_TAGS = Script(
    "stamp_tags",
    """
-- KEYS[1..] stamp keys of tags (on a cluster, one per call: each lives in its own slot)
-- ARGV[1] "soft" or "hard"
-- returns the server's time in microseconds, now the stamps' soft (or hard) invalidation time
-- A stamp is "<soft us> <hard us> <created us>" (core/tags.py). Invalidating writes the stamp,
-- and nothing else: the same for ten entries filed under the tag or ten million. A missing
-- stamp is created invalidated now.
local now = redis.call('TIME')
local us = tonumber(now[1]) * 1000000 + tonumber(now[2])
for i = 1, #KEYS do
  local soft, hard, created = 0, 0, us
  local stamp = redis.call('GET', KEYS[i])
  if stamp then
    local a, b, c = string.match(stamp, '^(%d+) (%d+) (%d+)$')
    if a then
      soft, hard, created = tonumber(a), tonumber(b), tonumber(c)
    end
  end
  if ARGV[1] == 'hard' then
    hard = us
  else
    soft = us
  end
  redis.call('SET', KEYS[i], string.format('%.0f %.0f %.0f', soft, hard, created))
end
return string.format('%.0f', us)
""",
)

SOFT_INVALIDATE = Script(
    "soft_invalidate",
    """
-- KEYS[1] cache key, KEYS[2] its meta key, KEYS[3] its lock key (or its epoch key: fenced)
-- ARGV[1] channel, [2] message, [3] "lock" or "epoch", [4] ms an epoch is kept, [5] (S)PUBLISH
-- returns 1 if the key held a value, now invalidated softly, else 0
-- The value stays; its meta gains the mark "x1 <ms> " before what it held (core/meta.py), with
-- the value's own expiry, so readers see it stale from now on. A load in progress began
-- before: its write is voided as delete() voids it (the lock is deleted, or the fenced
-- epoch moved on), and its waiters sent to contend for the refresh.
if ARGV[3] == 'epoch' then
  redis.call('INCR', KEYS[3])
  redis.call('PEXPIRE', KEYS[3], ARGV[4])
  redis.call(ARGV[5], ARGV[1], ARGV[2])
elseif redis.call('DEL', KEYS[3]) == 1 then
  redis.call(ARGV[5], ARGV[1], ARGV[2])
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -2 then
  return 0
end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local meta = redis.call('GET', KEYS[2]) or ''
if string.sub(meta, 1, 3) == 'x1 ' then
  meta = string.match(meta, '^x1 %d+ (.*)$') or ''
end
local marked = string.format('x1 %.0f ', ms) .. meta
if pttl > 0 then
  redis.call('SET', KEYS[2], marked, 'PX', pttl)
else
  redis.call('SET', KEYS[2], marked)
end
return 1
""",
    publishes=True,
)

VOID = Script(
    "void",
    """
-- KEYS[1] lock key, KEYS[2] meta key
-- ARGV[1] wake-up channel, ARGV[2] wake-up message, ARGV[3] (S)PUBLISH
-- returns 1 if a load was in progress (its write is now void), else 0
-- Deleting the lock voids the holder's pending write (COMMIT checks the token); the message
-- sends its waiters back to contend for a fresh load instead of waiting out the TTL. The meta
-- goes with its value (deleted, or moved to another version): it must not outlive it.
redis.call('DEL', KEYS[2])
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call(ARGV[3], ARGV[1], ARGV[2])
  return 1
end
return 0
""",
    publishes=True,
)

COMPARE_DELETE = Script(
    "compare_delete",
    """
-- KEYS[1] key
-- ARGV[1] expected value
-- returns 1 when the key held ARGV[1] and is now deleted, else 0
-- Token-safe removal of a record written by one holder (a Celery enqueue mark holding a task
-- id, a guard's holder record): a record already replaced by a newer holder is left alone.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
""",
)

COMPARE_PEXPIRE = Script(
    "compare_pexpire",
    """
-- KEYS[1] key
-- ARGV[1] expected value, ARGV[2] new ttl in ms
-- returns 1 when the key held ARGV[1] and now lives ARGV[2] ms more, else 0
-- Renews a guard's holder record with its lock, and never a newer holder's record.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
""",
)

MARK_QUEUED = Script(
    "mark_queued",
    """
-- KEYS[1] lock key, KEYS[2] holder record key, KEYS[3] queued mark key
-- ARGV[1] job id, ARGV[2] mark ttl in ms
-- returns {1, ARGV[1]} when the job is now the one queued, {0, the queued job's id} when
-- another job is queued, {2, the holder record "<token> <holder>"} when one is running
-- One call, so that no caller ever reads a mark that another caller is about to take back.
-- A job is running while the lock is held by the token its holder record names; a record
-- whose lock is gone belongs to a job that is finishing, which a new job need not wait for.
local lock = redis.call('GET', KEYS[1])
local record = redis.call('GET', KEYS[2])
if lock and record and string.sub(record, 1, #lock + 1) == lock .. ' ' then
  return {2, record}
end
if redis.call('SET', KEYS[3], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, ARGV[1]}
end
return {0, redis.call('GET', KEYS[3])}
""",
)

BLOOM_ADD = Script(
    "bloom_add",
    """
-- KEYS[1] the filter's bits, KEYS[2] its meta hash (layout, count)
-- ARGV[1] layout signature "bits:hashes", ARGV[2] number of items n, then k positions per item
-- returns {items counted after this call, then per item 1 if it was new, 0 if all its bits
--          were already set}
-- Setting and testing the bits is one atomic step: two processes adding at once lose nothing
-- and need no lock. A filter laid out differently (other capacity or error rate) is refused.
local layout = redis.call('HGET', KEYS[2], 'layout')
if layout and layout ~= ARGV[1] then
  return redis.error_reply('STAMPEDE_BLOOM_LAYOUT filter is laid out as ' .. layout)
end
if not layout then
  redis.call('HSET', KEYS[2], 'layout', ARGV[1])
end
local n = tonumber(ARGV[2])
local k = (#ARGV - 2) / n
local reply = {0}
local added = 0
for i = 0, n - 1 do
  local new = 0
  for j = 1, k do
    if redis.call('SETBIT', KEYS[1], ARGV[2 + i * k + j], 1) == 0 then
      new = 1
    end
  end
  reply[i + 2] = new
  added = added + new
end
reply[1] = redis.call('HINCRBY', KEYS[2], 'count', added)
return reply
""",
)

BLOOM_CHECK = Script(
    "bloom_check",
    """
-- KEYS[1] the filter's bits, KEYS[2] its meta hash
-- ARGV[1] layout signature, ARGV[2] number of items n, then k positions per item
-- returns per item 1 if every one of its bits is set (maybe added), 0 if not (never added)
local layout = redis.call('HGET', KEYS[2], 'layout')
if layout and layout ~= ARGV[1] then
  return redis.error_reply('STAMPEDE_BLOOM_LAYOUT filter is laid out as ' .. layout)
end
local n = tonumber(ARGV[2])
local k = (#ARGV - 2) / n
local reply = {}
for i = 0, n - 1 do
  local present = 1
  for j = 1, k do
    if redis.call('GETBIT', KEYS[1], ARGV[2 + i * k + j]) == 0 then
      present = 0
      break
    end
  end
  reply[i + 1] = present
end
return reply
""",
)

FENCED_READ = Script(
    "fenced_read",
    """
-- KEYS[1] cache key, KEYS[2] epoch key, KEYS[3] meta key
-- ARGV[1] ms a new epoch key is kept
-- returns {the cache key's value (nil when absent), the epoch, the meta (nil when absent)}
-- A fenced fill's read once its (outside) lock is won: the epoch it sees is the one its
-- commit must still find, or a delete() came in between and the load is void. A missing
-- epoch is created, so that a FLUSHDB during the load (which removes it) voids it too.
local epoch = redis.call('GET', KEYS[2])
if not epoch then
  epoch = '0'
  redis.call('SET', KEYS[2], epoch, 'PX', ARGV[1])
end
return {redis.call('GET', KEYS[1]), epoch, redis.call('GET', KEYS[3])}
""",
)

FENCED_COMMIT = Script(
    "fenced_commit",
    """
-- KEYS[1] cache key, KEYS[2] written key, KEYS[3] epoch key, KEYS[4] meta key
-- ARGV[1] token, [2] epoch, [3] value, [4] ttl ms, [5] channel, [6] message, [7] flag, [8] keep...
-- returns 1 when written (or nothing to write) and the waiters told; 0 when refused: a newer
-- holder's write already landed (its token is larger), or a delete() voided this load.
-- ARGV[2] is the epoch seen when the lock was won ('' for none); ARGV[4] 0: no expiry,
-- -1: no write; ARGV[7] "1": meta, newline and value travel with the message; ARGV[8]: how
-- long the written key is kept at least; ARGV[9] the meta; ARGV[10] "1" when there is a
-- value, "0" when not (a failure: its meta only); ARGV[11] PUBLISH, or SPUBLISH on a
-- cluster (``run`` appends it). The value and its meta are written together, with one
-- expiry (see COMMIT).
-- The lock lives outside this Redis (Redlock, ZooKeeper), so the write cannot check it here;
-- it checks the lock's fencing token instead, which only grows from holder to holder.
local epoch = redis.call('GET', KEYS[3]) or ''
if epoch ~= ARGV[2] then
  return 0
end
local token = tonumber(ARGV[1])
local written = tonumber(redis.call('GET', KEYS[2]) or '-1')
if token < written then
  return 0
end
"""
    + _WRITE_PART
    + """if ttl >= 0 then
  write(KEYS[1], ARGV[10] == '1', ARGV[3])
  write(KEYS[4], ARGV[9] ~= '', ARGV[9])
  local keep = math.max(ttl, tonumber(ARGV[8]))
  if ttl == 0 then
    redis.call('SET', KEYS[2], ARGV[1])
  else
    redis.call('SET', KEYS[2], ARGV[1], 'PX', keep)
  end
end
if ARGV[7] == '1' then
  redis.call(ARGV[11], ARGV[5], ARGV[6] .. ARGV[9] .. '\\n' .. ARGV[3])
else
  redis.call(ARGV[11], ARGV[5], ARGV[6])
end
return 1
""",
    publishes=True,
)

FENCED_VOID = Script(
    "fenced_void",
    """
-- KEYS[1] epoch key, KEYS[2] meta key
-- ARGV[1] wake-up channel, [2] wake-up message, [3] ms the epoch key is kept, [4] PUBLISH/SPUBLISH
-- returns the new epoch
-- A delete() during a fenced load: the load's commit finds another epoch and writes nothing;
-- its waiters are sent back to contend for a fresh load. The meta goes with its value.
redis.call('DEL', KEYS[2])
local epoch = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call(ARGV[4], ARGV[1], ARGV[2])
return epoch
""",
    publishes=True,
)

EACH_EXISTS = Script(
    "each_exists",
    """
-- KEYS the keys asked about (any keys: never run on a Redis Cluster, stampede.io._async.batch)
-- ARGV none
-- returns one 1 or 0 per key, in order (EXISTS of several keys answers only how many exist)
local found = {}
for i, key in ipairs(KEYS) do
    found[i] = redis.call('EXISTS', key)
end
return found
""",
)

INCR_EXISTING = Script(
    "incr_existing",
    """
-- KEYS[1] the key
-- ARGV[1] the amount to add
-- returns the new value; false (nil in RESP2) when the key does not exist; an error when
-- its value is no 64-bit integer (a serialized value, or a sum past the range)
-- django-redis's incr(): the check and the INCRBY in one script, so a key that expires
-- between them is never created again with no expiry.
if redis.call('EXISTS', KEYS[1]) == 1 then
    return redis.call('INCRBY', KEYS[1], ARGV[1])
end
return false
""",
)

ALL = (
    ACQUIRE,
    RELEASE,
    EXTEND,
    FENCE_RAISE,
    ACQUIRE_READ,
    COMMIT,
    VOID,
    STAMP_TAGS,
    SOFT_INVALIDATE,
    COMPARE_DELETE,
    COMPARE_PEXPIRE,
    MARK_QUEUED,
    BLOOM_ADD,
    BLOOM_CHECK,
    FENCED_READ,
    FENCED_COMMIT,
    FENCED_VOID,
    EACH_EXISTS,
    INCR_EXISTING,
)


def publish_command(client: Any) -> str:
    """Return the command that publishes a wake-up through ``client``'s Redis (a sync client).

    ``PUBLISH``, except on a cluster whose nodes all have sharded pub/sub (Redis >= 7.0):
    ``SPUBLISH`` there, so the message stays on the shard that owns the channel's slot (the
    slot of its key, by the hash tag), where the sharded listener subscribed. A 6.2 cluster
    has no ``SPUBLISH``, and a script must never write and then fail on an unknown command:
    its wake-ups are plain (``cluster_pubsub``), asked before the first script sends one.
    """
    if not clients.is_cluster(client):
        return "PUBLISH"
    return cluster_pubsub.pubsub_of(client).publish


async def apublish_command(client: Any) -> str:
    """Async twin of :func:`publish_command`, for ``redis.asyncio`` clients."""
    if not clients.is_cluster(client):
        return "PUBLISH"
    return (await cluster_pubsub.apubsub_of(client)).publish


def _with_publish(client: Any, script: Script, args: Sequence[Any]) -> Sequence[Any]:
    if not script.publishes:
        return args
    return (*args, publish_command(client), *script.kinds)


async def _awith_publish(client: Any, script: Script, args: Sequence[Any]) -> Sequence[Any]:
    if not script.publishes:
        return args
    return (*args, await apublish_command(client), *script.kinds)


def run(client: Any, script: Script, keys: Sequence[Any], args: Sequence[Any]) -> Any:
    """Return the result of ``script`` run on ``client``, loading it if the server lacks it."""
    args = _with_publish(client, script, args)
    try:
        return client.evalsha(script.sha, len(keys), *keys, *args)
    except NoScriptError:
        return client.eval(script.text, len(keys), *keys, *args)


def run_many(
    client: Any, script: Script, calls: Sequence[tuple[Sequence[Any], Sequence[Any]]]
) -> list[Any]:
    """Return the results of ``script`` run once per (keys, args) in ``calls``, in one round trip.

    A pipeline (not a transaction: on a cluster it splits by slot); after ``NOSCRIPT`` the
    script is loaded once and the whole batch sent again, which is safe for idempotent scripts.
    """
    if not calls:
        return []

    def send() -> list[Any]:
        pipe = client.pipeline(transaction=False)
        try:
            for keys, args in calls:
                pipe.evalsha(script.sha, len(keys), *keys, *_with_publish(client, script, args))
        except RedisClusterException:  # redis-py < 6: no script in a cluster pipeline
            return [run(client, script, keys, args) for keys, args in calls]
        return list(pipe.execute())

    try:
        return send()
    except NoScriptError:
        client.script_load(script.text)
        return send()


async def arun(client: Any, script: Script, keys: Sequence[Any], args: Sequence[Any]) -> Any:
    """Async twin of :func:`run`, for ``redis.asyncio`` clients."""
    await clients.learn_slots(client)  # else a cold cluster client may send it anywhere
    args = await _awith_publish(client, script, args)
    try:
        return await client.evalsha(script.sha, len(keys), *keys, *args)
    except NoScriptError:
        return await client.eval(script.text, len(keys), *keys, *args)


async def arun_many(
    client: Any, script: Script, calls: Sequence[tuple[Sequence[Any], Sequence[Any]]]
) -> list[Any]:
    """Async twin of :func:`run_many`: one round trip for the whole batch."""
    if not calls:
        return []

    async def send() -> list[Any]:
        pipe = client.pipeline(transaction=False)
        try:
            for keys, args in calls:
                published = await _awith_publish(client, script, args)
                pipe.evalsha(script.sha, len(keys), *keys, *published)
        except RedisClusterException:  # redis-py < 6: no script in a cluster pipeline
            return [await arun(client, script, keys, args) for keys, args in calls]
        return list(await pipe.execute())

    try:
        return await send()
    except NoScriptError:
        await client.script_load(script.text)
        return await send()
