-- unlock: free the resource lock a finished run kept (a handler thread that outlived its job
-- timeout or a shutdown: its job was already settled, its lock held until the thread returned).
-- KEYS[1] -> <prefix>:{Q}:lock:<resource>  (String, '<id>:<lease>')
-- KEYS[2] -> <prefix>:{Q}:job:<id>         (Hash)
-- ARGV[1] -> job id, ARGV[2] -> lease token of the run that returned
-- Returns: 1 freed, 0 the lock was not that run's any more (expired, or taken: nothing changes).
-- Errors: none of its own.
local lock_key, job_key = KEYS[1], KEYS[2]
local id, lease = ARGV[1], ARGV[2]
if lock_holder(lock_key) ~= id .. ':' .. lease then return 0 end
redis.call('DEL', lock_key)
-- The next attempt's claim no longer has to wait for it.
if redis.pcall('HGET', job_key, 'lock_kept') == lease then
  redis.call('HDEL', job_key, 'lock_kept')
end
return 1
