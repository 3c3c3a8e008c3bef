-- release: give leased jobs back to the head of the queue without spending an attempt
-- (graceful shutdown).
-- KEYS[1] -> <prefix>:{Q}:queue       (List)
-- KEYS[2] -> <prefix>:{Q}:processing  (ZSET)
-- KEYS[3] -> <prefix>:{Q}:stats       (Hash)
-- Undeclared keys under the same {Q} tag: job hashes and resource locks.
-- ARGV[1] -> job key prefix, ARGV[2] -> lock key prefix, ARGV[3] -> worker id
-- ARGV[4] -> reason (kept in the history)
-- ARGV[5..] -> pairs: job id, lease token
-- Returns: one integer per pair: 1 released, 0 not the lease holder (nothing changed).
-- Errors: none of its own.
local ready_key, processing_key, stats_key = KEYS[1], KEYS[2], KEYS[3]
local job_prefix, lock_prefix, worker, reason = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local now = now_ms()
local result, released = {}, 0

for i = 5, #ARGV, 2 do
  local id, lease = ARGV[i], ARGV[i + 1]
  local job_key = job_prefix .. id
  local f = redis.call('HMGET', job_key, 'status', 'lease', 'attempt', 'resource_key', 'events')
  if f[1] == 'processing' and f[2] == lease then
    local attempt = math.max(tonumber(f[3]) - 1, 0)
    local n, hfield, hvalue = history_entry(f[5], 'released', now, attempt, worker, reason)
    redis.call('HSET', job_key, 'status', 'queued', 'attempt', attempt, 'updated_at', now,
      'queued_at', now, 'events', n, hfield, hvalue)
    redis.call('ZREM', processing_key, id)
    redis.call('RPUSH', ready_key, id)
    release_lock(lock_prefix, f[4], id .. ':' .. lease)
    released = released + 1
    result[#result + 1] = 1
  else
    result[#result + 1] = 0
  end
end
if released > 0 then redis.call('HINCRBY', stats_key, 'released', released) end
return result
