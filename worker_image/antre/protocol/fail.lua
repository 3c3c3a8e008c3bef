-- fail: a run failed; retry the job after a delay, or dead-letter it.
-- KEYS[1] -> <prefix>:{Q}:processing  (ZSET)
-- KEYS[2] -> <prefix>:{Q}:retry       (ZSET)
-- KEYS[3] -> <prefix>:{Q}:dead        (List)
-- KEYS[4] -> <prefix>:{Q}:stats       (Hash)
-- KEYS[5] -> <prefix>:{Q}:job:<id>    (Hash)
-- Undeclared key under the same {Q} tag: the job's resource lock.
-- ARGV[1] -> job id, ARGV[2] -> lease token
-- ARGV[3] -> error text (kept as last_error)
-- ARGV[4] -> retry_delay_ms; -1 means permanent: dead at once
-- ARGV[5] -> worker id (the claimer's: part of the fence), ARGV[6] -> lock key prefix
-- ARGV[7] -> 1 to leave the resource lock to expire (the run may still be going), else 0
-- Returns: {'retrying', due_ms} or {'dead', died_at_ms}
-- Errors: ANTRE_NOT_LEASE_HOLDER when the token is not current (nothing changes).
local processing_key, retry_key, dead_key, stats_key, job_key = KEYS[1], KEYS[2], KEYS[3],
  KEYS[4], KEYS[5]
local id, lease, err, delay_ms = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local worker, lock_prefix, keep_lock = ARGV[5], ARGV[6], ARGV[7] == '1'
local now = now_ms()

local f = redis.call('HMGET', job_key, 'status', 'lease', 'attempt', 'max_attempts',
  'resource_key', 'events', 'worker')
if f[1] ~= 'processing' or f[2] ~= lease or f[7] ~= worker then
  return redis.error_reply('ANTRE_NOT_LEASE_HOLDER job ' .. id .. ' lease ' .. lease
    .. ': not the current lease (requeued, settled, or claimed by another worker)')
end
redis.call('ZREM', processing_key, id)
if keep_lock then
  -- The claim of the next attempt must not take this lock over while the old run may go on.
  redis.call('HSET', job_key, 'lock_kept', lease)
else
  release_lock(lock_prefix, f[5], id .. ':' .. lease)
end

-- A record with unreadable counters cannot be retried safely: dead-letter it.
local attempt, max_attempts = tonumber(f[3]) or 0, tonumber(f[4]) or 0
if delay_ms < 0 or attempt >= max_attempts then
  dead_letter(job_key, dead_key, id, now, f[6], attempt, worker, err)
  redis.call('HINCRBY', stats_key, 'dead', 1)
  return {'dead', now}
end

local due = now + delay_ms
local n, hfield, hvalue = history_entry(f[6], 'retrying', now, attempt, worker, err)
redis.call('HSET', job_key, 'status', 'retrying', 'last_error', err, 'updated_at', now,
  'queued_at', due, 'events', n, hfield, hvalue)
redis.call('ZADD', retry_key, due, id)
redis.call('HINCRBY', stats_key, 'retried', 1)
return {'retrying', due}
