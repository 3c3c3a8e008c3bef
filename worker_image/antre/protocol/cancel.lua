-- cancel: withdraw a job that is not running.
-- KEYS[1] -> <prefix>:{Q}:queue         (List)
-- KEYS[2] -> <prefix>:{Q}:retry         (ZSET)
-- KEYS[3] -> <prefix>:{Q}:dead_letters  (ZSET)
-- KEYS[4] -> <prefix>:{Q}:stats         (Hash)
-- KEYS[5] -> <prefix>:{Q}:job:<id>      (Hash; packed once finished or dead)
-- KEYS[6] -> <prefix>:{Q}:queued        (Hash: the job's field while it has not been claimed)
-- Undeclared key under the same {Q} tag: the job's idempotency key.
-- ARGV[1] -> job id, ARGV[2] -> done_ttl_ms, ARGV[3] -> idempotency key prefix
-- Returns: the status the job had: 'queued', 'scheduled', 'retrying' or 'dead' (now cancelled),
--          or 'done' / 'cancelled' (already finished: nothing changes).
-- Errors: ANTRE_JOB_NOT_FOUND, ANTRE_JOB_BUSY (it is processing; it cannot be withdrawn).
-- A queued job's id stays in the ready list (removing it would scan the list): the claim that
-- pops it finds the record cancelled (or gone) and drops it. Every other removal is O(log N).
local ready_key, retry_key, dead_key, stats_key, job_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4],
  KEYS[5]
local queued_key = KEYS[6]
local id, done_ttl_ms, idem_prefix = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local f = read_fields(job_key, 'status', 'idempotency_key', 'events', 'attempt')
local status = f[1]
-- A job not claimed yet is a field of the queued Hash; its key gets the cancelled record
-- (packed, as any finished record), so the id still names the job.
local fresh = nil
if not status then
  fresh = queued_job(queued_key, retry_key, id)
  if not fresh then return redis.error_reply('ANTRE_JOB_NOT_FOUND job ' .. id) end
  status = fresh.status
  f = {status, fresh.idempotency_key, fresh.events, fresh.attempt}
end
if status == 'processing' then
  return redis.error_reply('ANTRE_JOB_BUSY job ' .. id .. ' is processing')
end
if status == 'done' or status == 'cancelled' then return status end
if fresh then
  redis.call('HDEL', queued_key, id)
end
if status == 'dead' then
  redis.call('ZREM', dead_key, id)
  unpack_in_place(job_key, id)
elseif status ~= 'queued' then
  redis.call('ZREM', retry_key, id)
end
local now = now_ms()
local n, hfield, hvalue = history_entry(f[3], 'cancelled', now, f[4], nil, nil)
if fresh then
  fresh.status, fresh.updated_at, fresh.finished_at, fresh.events = 'cancelled', now, now, n
  fresh[hfield] = hvalue
  if done_ttl_ms > 0 then
    redis.call('SET', job_key, pack_record(flat_fields(fresh)), 'PX', done_ttl_ms)
  end
else
  redis.call('HSET', job_key, 'status', 'cancelled', 'updated_at', now, 'finished_at', now,
    'events', n, hfield, hvalue)
  keep_finished(job_key, done_ttl_ms)
end
-- A cancelled job no longer blocks a new enqueue with the same key.
drop_idempotency_key(idem_prefix, f[2], id)
redis.call('HINCRBY', stats_key, 'cancelled', 1)
return status
