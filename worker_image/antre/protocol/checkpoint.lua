-- checkpoint: record that a step of a multi-step job is done, fenced by the lease.
-- KEYS[1] -> <prefix>:{Q}:job:<id>      (Hash; steps live in fields step:<name>)
-- KEYS[2] -> <prefix>:{Q}:processing    (ZSET, id -> lease deadline ms)
-- Undeclared key under the same {Q} tag: the job's resource lock.
-- ARGV[1] -> lease token, ARGV[2] -> step name, ARGV[3] -> step result (JSON text)
-- ARGV[4] -> worker id (the claimer's: part of the fence), ARGV[5] -> job id
-- ARGV[6] -> lock key prefix
-- Returns: 1
-- Errors: ANTRE_NOT_LEASE_HOLDER when the lease is not held: not the current token, the lease
--         deadline passed, or the resource lock is no longer the run's own (nothing is written).
local job_key, processing_key = KEYS[1], KEYS[2]
local lease, step, value, worker, id, lock_prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5],
  ARGV[6]
local f = read_fields(job_key, 'status', 'lease', 'worker', 'resource_key')
local held, why = lease_held(f, id, lease, worker, redis.call('ZSCORE', processing_key, id),
  now_ms(), lock_prefix)
if not held then
  return redis.error_reply('ANTRE_NOT_LEASE_HOLDER ' .. job_key .. ' lease ' .. lease .. ': ' .. why)
end
redis.call('HSET', job_key, 'step:' .. step, value)
return 1
