-- fail: a run failed; retry the job after a delay, or dead-letter it.
-- KEYS[1] -> <prefix>:{Q}:processing    (ZSET)
-- KEYS[2] -> <prefix>:{Q}:retry         (ZSET)
-- KEYS[3] -> <prefix>:{Q}:dead_letters  (ZSET)
-- KEYS[4] -> <prefix>:{Q}:stats         (Hash)
-- KEYS[5] -> <prefix>:{Q}:job:<id>      (Hash)
-- Undeclared key under the same {Q} tag: the job's resource lock.
-- ARGV[1] -> job id, ARGV[2] -> lease token
-- ARGV[3] -> error text (kept as last_error)
-- ARGV[4] -> retry_delay_ms; -1 means permanent: dead at once
-- ARGV[5] -> worker id (the claimer's: part of the fence), ARGV[6] -> lock key prefix
-- ARGV[7] -> 1 to keep the resource lock (the run may still be going: its worker keeps
--            extending the lock until the run returns, then frees it), else 0
-- ARGV[8] -> 1 to give the attempt back (the run never started: its type is unknown to this
--            worker), else 0
-- KEYS[6] -> <prefix>:{Q}:queue (List; optional): with it, ARGV[9] is the waiting key prefix
--            (claim.lua), and a lock this failure frees wakes the job that has waited longest
--            for the resource (wake_next_waiter), as an ack does
-- Returns: {'retrying', due_ms} or {'dead', died_at_ms}. The same call sent again after its
--          reply was lost (the same job, lease, worker, error and keep_lock) gets the first
--          sending's reply, the same values, and changes nothing: the record is still at that
--          lease and worker, and its newest history entry (but for a claim's `deferred`, the
--          retry waiting for the lock the call kept) is the one the call wrote, `retrying` or
--          `dead` with that error, with lock_kept naming the lease exactly when the call kept the
--          lock. Its worker then knows that it keeps the lock (earlier versions refused it).
-- Errors: ANTRE_NOT_LEASE_HOLDER when the lease is not held: not the current token, the lease
--         deadline passed (the reaper requeues the job), or the resource lock is no longer the
--         run's own; and not a call sent again as above. Nothing changes.
local processing_key, retry_key, dead_key, stats_key, job_key = KEYS[1], KEYS[2], KEYS[3],
  KEYS[4], KEYS[5]
local id, lease, err, delay_ms = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local worker, lock_prefix, keep_lock, refund = ARGV[5], ARGV[6], ARGV[7] == '1', ARGV[8] == '1'
local ready_key, waiting_prefix = KEYS[6], ARGV[9]
local now = now_ms()

local f = read_fields(job_key, 'status', 'lease', 'worker', 'resource_key', 'attempt',
  'max_attempts', 'events')
local held, why = lease_held(f, id, lease, worker, redis.call('ZSCORE', processing_key, id), now,
  lock_prefix)
if not held then
  local r = record_table(job_key, id)
  local event, at, text = run_settled_entry(r, lease, worker)
  -- A job without a resource has no lock to keep, and its record no lock_kept.
  local kept = keep_lock and r ~= nil and r.resource_key ~= nil
  if (event == 'retrying' or event == 'dead') and text == err
      and kept == (r.lock_kept == lease) then
    return {event, event == 'retrying' and at + delay_ms or at}
  end
  return redis.error_reply('ANTRE_NOT_LEASE_HOLDER job ' .. id .. ' lease ' .. lease .. ': ' .. why)
end
redis.call('ZREM', processing_key, id)
local extra = {}
if keep_lock and f[4] then
  -- The claim of the next attempt must not take this lock over while the old run may go on
  -- (a job without a resource has no lock, and its record no field for one).
  extra = {'lock_kept', lease}
else
  release_lock(lock_prefix, f[4], id .. ':' .. lease)
  if f[4] and ready_key and waiting_prefix then
    -- The job key is <job prefix><id>: the waiters' records share that prefix.
    wake_next_waiter(waiting_prefix .. f[4], ready_key, retry_key,
      string.sub(job_key, 1, #job_key - #id), now)
  end
end

-- A record with unreadable counters cannot be retried safely: dead-letter it.
local attempt, max_attempts = tonumber(f[5]) or 0, tonumber(f[6]) or 0
if refund then attempt = math.max(attempt - 1, 0) end
if delay_ms < 0 or attempt >= max_attempts then
  dead_letter(job_key, dead_key, id, now, f[7], attempt, SAME_WORKER, err,
    {'attempt', attempt, unpack(extra)})
  redis.call('HINCRBY', stats_key, 'dead', 1)
  return {'dead', now}
end

local due = now + delay_ms
local n, hfield, hvalue = history_entry(f[7], 'retrying', now, attempt, SAME_WORKER, err)
redis.call('HSET', job_key, 'status', 'retrying', 'attempt', attempt, 'last_error', err,
  'updated_at', now, 'queued_at', due, 'events', n, hfield, hvalue, unpack(extra))
redis.call('ZADD', retry_key, due, id)
redis.call('HINCRBY', stats_key, 'retried', 1)
return {'retrying', due}
