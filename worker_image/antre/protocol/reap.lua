-- reap: one reaper pass. Requeues jobs whose lease expired (the attempt counts: a job that
-- keeps killing its worker ends in dead), promotes due retries and delayed jobs, and drops
-- registry entries of workers whose entry expired.
-- KEYS[1] -> <prefix>:{Q}:queue       (List)
-- KEYS[2] -> <prefix>:{Q}:processing  (ZSET)
-- KEYS[3] -> <prefix>:{Q}:retry       (ZSET)
-- KEYS[4] -> <prefix>:{Q}:dead        (List)
-- KEYS[5] -> <prefix>:{Q}:stats       (Hash)
-- KEYS[6] -> <prefix>:{Q}:reaper      (String, pass lock)
-- KEYS[7] -> <prefix>:{Q}:workers     (ZSET)
-- Undeclared keys under the same {Q} tag: job hashes, resource locks, worker entries.
-- ARGV[1] -> batch limit (per kind of work)
-- ARGV[2] -> pass_lock_ms: 0 runs unconditionally, else only if the pass lock is free
-- ARGV[3] -> holder name for the pass lock
-- ARGV[4] -> job key prefix, ARGV[5] -> lock key prefix, ARGV[6] -> worker key prefix
-- Returns: {ran (0 = another process holds the pass lock), requeued, dead, promoted, workers_dropped,
--           more (1 when a batch limit was hit)}
-- Errors: none of its own.
local ready_key, processing_key, retry_key, dead_key, stats_key, reaper_key, workers_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local limit, pass_lock_ms, holder = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local job_prefix, lock_prefix, worker_prefix = ARGV[4], ARGV[5], ARGV[6]

if pass_lock_ms > 0 then
  if not redis.call('SET', reaper_key, holder, 'NX', 'PX', pass_lock_ms) then
    return {0, 0, 0, 0, 0, 0}
  end
end
local now = now_ms()
local requeued, dead = 0, 0

local expired = redis.call('ZRANGEBYSCORE', processing_key, '-inf', now, 'LIMIT', 0, limit)
if #expired > 0 then
  redis.call('ZREM', processing_key, unpack(expired))
end
for _, id in ipairs(expired) do
  local job_key = job_prefix .. id
  -- pcall and tonumber defaults: an error here would strand the rest of the batch, already
  -- removed from the processing set.
  local f = redis.pcall('HMGET', job_key, 'status', 'lease', 'attempt', 'max_attempts',
    'resource_key', 'events', 'worker')
  if f.err then f = {} end
  if f[1] == 'processing' then
    release_lock(lock_prefix, f[5], id .. ':' .. (f[2] or ''))
    local attempt, max_attempts = tonumber(f[3]) or 0, tonumber(f[4]) or 0
    local reason = 'lease expired during attempt ' .. attempt .. ' (worker '
      .. (f[7] or '?') .. ' lost or frozen past its lease)'
    if attempt >= max_attempts then
      dead_letter(job_key, dead_key, id, now, f[6], attempt, f[7], reason)
      dead = dead + 1
    else
      local n, hfield, hvalue = history_entry(f[6], 'lease_expired', now, attempt, f[7], reason)
      redis.call('HSET', job_key, 'status', 'queued', 'last_error', reason, 'updated_at', now,
        'queued_at', now, 'events', n, hfield, hvalue)
      -- To the head: it has waited a whole lease already.
      redis.call('RPUSH', ready_key, id)
      requeued = requeued + 1
    end
  end
end
if requeued > 0 then redis.call('HINCRBY', stats_key, 'lease_expired', requeued) end
if dead > 0 then
  redis.call('HINCRBY', stats_key, 'dead', dead)
  redis.call('HINCRBY', stats_key, 'lease_expired', dead)
end

local promoted = promote_due(ready_key, retry_key, job_prefix, now, limit)

-- Registry entries expire by TTL; the index loses members whose entry is gone.
local dropped = 0
local stale = redis.call('ZRANGEBYSCORE', workers_key, '-inf', now - 1000, 'LIMIT', 0, limit)
for _, wid in ipairs(stale) do
  if redis.call('EXISTS', worker_prefix .. wid) == 0 then
    redis.call('ZREM', workers_key, wid)
    dropped = dropped + 1
  end
end

local more = 0
if #expired == limit or promoted == limit then more = 1 end
return {1, requeued, dead, promoted, dropped, more}
