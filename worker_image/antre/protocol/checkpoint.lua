-- checkpoint: record that a step of a multi-step job is done, fenced by the lease token.
-- KEYS[1] -> <prefix>:{Q}:job:<id>   (Hash; steps live in fields step:<name>)
-- ARGV[1] -> lease token, ARGV[2] -> step name, ARGV[3] -> step result (JSON text)
-- ARGV[4] -> worker id (the claimer's: part of the fence)
-- Returns: 1
-- Errors: ANTRE_NOT_LEASE_HOLDER when the token is not current (nothing is written).
local job_key = KEYS[1]
local lease, step, value, worker = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local f = redis.call('HMGET', job_key, 'status', 'lease', 'worker')
if f[1] ~= 'processing' or f[2] ~= lease or f[3] ~= worker then
  return redis.error_reply('ANTRE_NOT_LEASE_HOLDER ' .. job_key .. ' lease ' .. lease
    .. ': not the current lease (requeued, settled, or claimed by another worker)')
end
redis.call('HSET', job_key, 'step:' .. step, value)
return 1
