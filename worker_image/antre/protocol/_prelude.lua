-- Shared helpers, prepended to every antre script when it is loaded (see _scripts.py).
-- Time comes from the Redis server alone (TIME), so no client clock is ever compared.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- History is a ring of HISTORY_SLOTS hash fields h:<n % slots> inside the job hash, so
-- it expires with the job and costs no extra key. Returns the field/value pair to add
-- to the caller's HSET, which keeps every transition at one write per job.
local HISTORY_SLOTS = 32
local function history_entry(events, event, at, attempt, worker, err)
  local n = (tonumber(events) or 0) + 1
  local entry = {n = n, event = event, at = at}
  if attempt then entry.attempt = tonumber(attempt) end
  if worker and worker ~= '' then entry.worker = worker end
  if err and err ~= '' then entry.error = err end
  return n, 'h:' .. (n % HISTORY_SLOTS), cjson.encode(entry)
end

-- Moves a job to the dead list with its reason (the caller counts it in the stats).
local function dead_letter(job_key, dead_key, id, now, events, attempt, worker, reason)
  local n, hfield, hvalue = history_entry(events, 'dead', now, attempt, worker, reason)
  redis.call('HSET', job_key, 'status', 'dead', 'last_error', reason, 'updated_at', now,
    'died_at', now, 'events', n, hfield, hvalue)
  redis.call('LPUSH', dead_key, id)
end

-- Compare-and-delete: only the holder's token frees a resource lock.
local function release_lock(lock_prefix, resource_key, token)
  if resource_key and resource_key ~= '' then
    local lock_key = lock_prefix .. resource_key
    if redis.call('GET', lock_key) == token then
      redis.call('DEL', lock_key)
    end
  end
end

-- Moves due ids from the retry ZSET to the head of the ready list, earliest due first.
local function promote_due(ready_key, retry_key, job_prefix, now, limit)
  local due = redis.call('ZRANGEBYSCORE', retry_key, '-inf', now, 'LIMIT', 0, limit)
  local n = #due
  if n == 0 then return 0 end
  redis.call('ZREM', retry_key, unpack(due))
  for i = n, 1, -1 do
    local id = due[i]
    local job_key = job_prefix .. id
    -- A live job always has its record; a missing one (evicted) is dropped, not resurrected.
    if redis.call('EXISTS', job_key) == 1 then
      redis.call('HSET', job_key, 'status', 'queued', 'queued_at', now)
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

-- The dead ids a replay or purge works on: the ids given from ARGV[first] on (each removed
-- from the dead list, unknown ones skipped), or else the `limit` oldest.
local function take_dead(dead_key, first, limit)
  if #ARGV < first then
    return redis.call('RPOP', dead_key, limit) or {}
  end
  local ids = {}
  for i = first, #ARGV do
    if redis.call('LREM', dead_key, 1, ARGV[i]) == 1 then ids[#ids + 1] = ARGV[i] end
  end
  return ids
end

-- ZREM of any number of members: Lua's unpack has a limit of a few thousand values.
local function zrem_all(key, members)
  for first = 1, #members, 1000 do
    redis.call('ZREM', key, unpack(members, first, math.min(first + 999, #members)))
  end
end
