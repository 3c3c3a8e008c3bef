-- unlock: free the resource lock a finished run kept (a handler thread that outlived its job
-- timeout or a shutdown: its job was already settled, its lock held until the thread returned).
-- KEYS[1] -> <prefix>:{Q}:lock:<resource>  (String, '<id>:<lease>')
-- KEYS[2] -> <prefix>:{Q}:job:<id>         (the record: Hash, or packed String)
-- KEYS[3] -> <prefix>:{Q}:queue, KEYS[4] -> <prefix>:{Q}:retry,
-- KEYS[5] -> <prefix>:{Q}:waiting:<resource> (optional, the three together): a lock it frees
--            wakes the job that has waited longest for the resource, as an ack does
-- ARGV[1] -> job id, ARGV[2] -> lease token of the run that returned
-- ARGV[3] -> job key prefix (with KEYS[3..5])
-- Returns: 1 freed, 0 the lock was not that run's any more (expired, or taken: nothing changes
--          but the record's lock_kept).
-- Errors: none of its own.
local lock_key, job_key = KEYS[1], KEYS[2]
local id, lease = ARGV[1], ARGV[2]
-- Whoever holds the lock now, the run has returned: a heartbeat that left before this call,
-- still naming the lock as kept, must not take it back once it is free (extend_lease.lua), and
-- the next attempt's claim no longer has to wait for it.
local kind = redis.call('TYPE', job_key)['ok']
if kind == 'hash' then
  if redis.call('HGET', job_key, 'lock_kept') == lease then
    redis.call('HDEL', job_key, 'lock_kept')
  end
elseif kind == 'string' then
  -- A dead record (the run's attempt was its last) is packed: unpack, forget, pack again.
  local record = unpack_record(redis.call('GET', job_key), id)
  if record and record.lock_kept == lease then
    local ttl_ms = redis.call('PTTL', job_key)
    unpack_in_place(job_key, id)
    redis.call('HDEL', job_key, 'lock_kept')
    pack_in_place(job_key, ttl_ms > 0 and ttl_ms or 0)
  end
end
if lock_holder(lock_key) ~= id .. ':' .. lease then return 0 end
redis.call('DEL', lock_key)
if KEYS[5] then wake_next_waiter(KEYS[5], KEYS[3], KEYS[4], ARGV[3], now_ms()) end
return 1
