-- cancel: withdraw a job that is not running.
-- KEYS[1] -> <prefix>:{Q}:queue         (List)
-- KEYS[2] -> <prefix>:{Q}:retry         (ZSET)
-- KEYS[3] -> <prefix>:{Q}:dead_letters  (ZSET)
-- KEYS[4] -> <prefix>:{Q}:stats         (Hash)
-- KEYS[5] -> <prefix>:{Q}:job:<id>      (Hash; packed once finished or dead)
-- Undeclared key under the same {Q} tag: the job's idempotency key.
-- ARGV[1] -> job id, ARGV[2] -> done_ttl_ms, ARGV[3] -> idempotency key prefix
-- Returns: the status the job had: 'queued', 'scheduled', 'retrying' or 'dead' (now cancelled),
--          or 'done' / 'cancelled' (already finished: nothing changes).
-- Errors: ANTRE_JOB_NOT_FOUND, ANTRE_JOB_BUSY (it is processing; it cannot be withdrawn).
-- A queued job's id stays in the ready list (removing it would scan the list): the claim that
-- pops it finds the record cancelled (or gone) and drops it. Every other removal is O(log N).
local ready_key, retry_key, dead_key, stats_key, job_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4],
  KEYS[5]
local id, done_ttl_ms, idem_prefix = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local f = read_fields(job_key, 'status', 'idempotency_key', 'events', 'attempt')
local status = f[1]
if not status then return redis.error_reply('ANTRE_JOB_NOT_FOUND job ' .. id) end
if status == 'processing' then
  return redis.error_reply('ANTRE_JOB_BUSY job ' .. id .. ' is processing')
end
if status == 'done' or status == 'cancelled' then return status end
if status == 'dead' then
  redis.call('ZREM', dead_key, id)
  unpack_in_place(job_key, id)
elseif status ~= 'queued' then
  redis.call('ZREM', retry_key, id)
end
local now = now_ms()
local n, hfield, hvalue = history_entry(f[3], 'cancelled', now, f[4], nil, nil)
redis.call('HSET', job_key, 'status', 'cancelled', 'updated_at', now, 'finished_at', now,
  'events', n, hfield, hvalue)
keep_finished(job_key, done_ttl_ms)
-- A cancelled job no longer blocks a new enqueue with the same key.
drop_idempotency_key(idem_prefix, f[2], id)
redis.call('HINCRBY', stats_key, 'cancelled', 1)
return status
