-- Shared helpers, prepended to every antre script when it is loaded (see scripts.py).
-- Time comes from the Redis server alone (TIME), so no client clock is ever compared.
-- Scripts never stop halfway: a Lua runtime error keeps the writes made before it, so reads of
-- keys a foreign producer or a hand edit may have given the wrong type go through pcall.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Ids given per call to the scripts that remove jobs by id (replay, purge): each removal is
-- O(log N), and the cap bounds how long one call holds Redis.
local MAX_IDS_PER_CALL = 1000

-- HMGET that answers an empty record for a key of the wrong type instead of raising.
local function read_fields(key, ...)
  local f = redis.pcall('HMGET', key, ...)
  if f.err then return {} end
  return f
end

-- History is a ring of HISTORY_SLOTS hash fields h:<n % slots> inside the job hash, so
-- it expires with the job and costs no extra key. Returns the field/value pair to add
-- to the caller's HSET, which keeps every transition at one write per job.
-- An entry is '<event>|<at: ms, hex>|<attempt>|<worker>|<error>', trailing empty parts left
-- out; its number n is known from its slot and the record's `events` counter. The worker is '^'
-- (SAME_WORKER) for a step of the run that the same attempt's `claimed` entry names, so a
-- claimed record keeps every value under Redis's 64-byte listpack limit (hash-max-listpack-value)
-- and stays a compact listpack instead of turning into a hashtable (about 3x the memory).
local HISTORY_SLOTS = 32
local SAME_WORKER = '^'
local function history_entry(events, event, at, attempt, worker, err)
  local n = (tonumber(events) or 0) + 1
  local entry = event .. '|' .. string.format('%x', at) .. '|' .. (tonumber(attempt) or '')
  local has_error = err and err ~= ''
  if (worker and worker ~= '') or has_error then entry = entry .. '|' .. (worker or '') end
  if has_error then entry = entry .. '|' .. err end
  return n, 'h:' .. (n % HISTORY_SLOTS), entry
end

-- Moves a job to the dead letters with its reason; the caller counts it in the stats. `extra`
-- holds more field/value pairs for the same HSET. The dead letters are a ZSET, so removal by
-- id is O(log N), scored in microseconds (a sequence breaks ties within one script), so
-- "newest first" is exact even for jobs that died in the same millisecond.
local dead_sequence = 0
local function dead_letter(job_key, dead_key, id, now, events, attempt, worker, reason, extra)
  local n, hfield, hvalue = history_entry(events, 'dead', now, attempt, worker, reason)
  local fields = {'status', 'dead', 'last_error', reason, 'updated_at', now, 'died_at', now,
    'events', n, hfield, hvalue}
  for _, value in ipairs(extra or {}) do fields[#fields + 1] = value end
  redis.call('HSET', job_key, unpack(fields))
  local t = redis.call('TIME')
  dead_sequence = dead_sequence + 1
  redis.call('ZADD', dead_key, tonumber(t[1]) * 1000000 + tonumber(t[2]) + dead_sequence, id)
end

-- The holder of a resource lock ('<id>:<lease>') or nil, and true when the key has the wrong
-- type (GET answers false, not nil, for a missing key).
local function lock_holder(lock_key)
  local holder = redis.pcall('GET', lock_key)
  if type(holder) == 'table' then return nil, true end
  if not holder then return nil, false end
  return holder, false
end

-- Compare-and-delete: only the holder's token frees a resource lock.
local function release_lock(lock_prefix, resource_key, token)
  if resource_key and resource_key ~= '' then
    local lock_key = lock_prefix .. resource_key
    if lock_holder(lock_key) == token then
      redis.call('DEL', lock_key)
    end
  end
end

-- ZREM of any number of members: Lua's unpack has a limit of a few thousand values.
local function zrem_all(key, members)
  for first = 1, #members, 1000 do
    redis.call('ZREM', key, unpack(members, first, math.min(first + 999, #members)))
  end
end

-- Moves due ids from the retry ZSET to the head of the ready list, earliest due first.
local function promote_due(ready_key, retry_key, job_prefix, now, limit)
  local due = redis.call('ZRANGEBYSCORE', retry_key, '-inf', now, 'LIMIT', 0, limit)
  local n = #due
  if n == 0 then return 0 end
  zrem_all(retry_key, due)
  for i = n, 1, -1 do
    local id = due[i]
    local job_key = job_prefix .. id
    -- A live job always has its record; a missing one (evicted) is dropped, not resurrected.
    if redis.call('EXISTS', job_key) == 1 then
      redis.pcall('HSET', job_key, 'status', 'queued', 'queued_at', now)
      redis.call('RPUSH', ready_key, id)
    end
  end
  return n
end

-- A finished (done or cancelled) record is kept for done_ttl_ms, or deleted at once when 0.
local function keep_finished(job_key, done_ttl_ms)
  if done_ttl_ms > 0 then
    redis.call('PEXPIRE', job_key, done_ttl_ms)
  else
    redis.call('DEL', job_key)
  end
end

-- An idempotency marker is '<id>' or '<id>|<digest>' while its job is live, with '|done'
-- appended once the job succeeded. The digest (of the job's type and payload) tells a retried
-- enqueue from a different request reusing the key. Returns id, digest ('' if none), done.
local function parse_marker(marker)
  local id, rest = string.match(marker, '^([^|]*)(.*)$')
  local done = string.sub(rest, -5) == '|done'
  if done then rest = string.sub(rest, 1, -6) end
  return id, string.match(rest, '^|([^|]+)$') or '', done
end

local function marker_text(id, digest, done)
  local text = id
  if digest and digest ~= '' then text = text .. '|' .. digest end
  if done then text = text .. '|done' end
  return text
end

-- Deletes a job's idempotency key if it still points at that job (a newer job may own it).
local function drop_idempotency_key(idem_prefix, idem, id)
  if not idem then return end
  local marker = redis.pcall('GET', idem_prefix .. idem)
  if type(marker) == 'string' and parse_marker(marker) == id then
    redis.call('DEL', idem_prefix .. idem)
  end
end

-- The dead ids a replay or purge works on: the ids given from ARGV[first] on (each removed
-- from the dead letters, unknown ones skipped), or else the `limit` oldest.
local function take_dead(dead_key, first, limit)
  local ids = {}
  if #ARGV < first then
    local popped = redis.call('ZPOPMIN', dead_key, limit)
    for i = 1, #popped, 2 do ids[#ids + 1] = popped[i] end
    return ids
  end
  for i = first, #ARGV do
    if redis.call('ZREM', dead_key, ARGV[i]) == 1 then ids[#ids + 1] = ARGV[i] end
  end
  return ids
end

local function too_many_ids(first)
  if #ARGV - first + 1 > MAX_IDS_PER_CALL then
    return redis.error_reply('ANTRE_INVALID ids: got ' .. (#ARGV - first + 1)
      .. '; at most ' .. MAX_IDS_PER_CALL .. ' per call')
  end
  return nil
end

-- ZMSCORE of any number of members, in chunks: one score (or false) per member.
local function zmscore_all(key, members)
  local scores = {}
  for first = 1, #members, 1000 do
    local part = redis.call('ZMSCORE', key, unpack(members, first, math.min(first + 999, #members)))
    for _, score in ipairs(part) do scores[#scores + 1] = score end
  end
  return scores
end

-- A lease is held by a run while its job is processing under that token, claimed by that
-- worker, before its deadline, and (for a job with a resource) while the resource lock is still
-- the run's own. `f` holds status, lease, worker and resource_key; `deadline` is the job's
-- score in the processing set. Returns true, or false and why.
local function lease_held(f, id, lease, worker, deadline, now, lock_prefix)
  if f[1] ~= 'processing' or f[2] ~= lease or f[3] ~= worker then
    return false, 'not the current lease (requeued, settled, or claimed by another worker)'
  end
  if not deadline or tonumber(deadline) < now then
    return false, 'the lease deadline has passed (the reaper requeues the job)'
  end
  if f[4] and lock_holder(lock_prefix .. f[4]) ~= id .. ':' .. lease then
    return false, 'resource lock ' .. f[4] .. ' is no longer this run\'s'
  end
  return true, nil
end

-- The lease of a processing job ran out (its worker died, froze, or lost Redis): the attempt
-- counts. The job goes back to the head of the queue, or to the dead letters when that was its
-- last attempt (then `expired_lease` remembers the lease, so a late ack of it still counts).
-- The caller has removed the id from the processing set. `f` holds status, lease, attempt,
-- max_attempts, resource_key, events, worker. Returns 'requeued' or 'dead'.
local function expire_lease(job_key, id, f, now, ready_key, dead_key, lock_prefix)
  release_lock(lock_prefix, f[5], id .. ':' .. (f[2] or ''))
  local attempt, max_attempts = tonumber(f[3]) or 0, tonumber(f[4]) or 0
  local reason = 'lease expired during attempt ' .. attempt .. ' (worker '
    .. (f[7] or '?') .. ' lost or frozen past its lease, or cut off from Redis)'
  if attempt >= max_attempts then
    dead_letter(job_key, dead_key, id, now, f[6], attempt, SAME_WORKER, reason,
      {'expired_lease', f[2] or ''})
    return 'dead'
  end
  local n, hfield, hvalue = history_entry(f[6], 'lease_expired', now, attempt, SAME_WORKER,
    reason)
  redis.call('HSET', job_key, 'status', 'queued', 'last_error', reason, 'updated_at', now,
    'queued_at', now, 'events', n, hfield, hvalue)
  -- To the head: it has waited a whole lease already.
  redis.call('RPUSH', ready_key, id)
  return 'requeued'
end
