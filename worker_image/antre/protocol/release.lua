-- release: give leased jobs back to the head of the queue without spending an attempt
-- (graceful shutdown).
-- KEYS[1] -> <prefix>:{Q}:queue       (List)
-- KEYS[2] -> <prefix>:{Q}:processing  (ZSET)
-- KEYS[3] -> <prefix>:{Q}:stats       (Hash)
-- Undeclared keys under the same {Q} tag: job hashes and resource locks.
-- ARGV[1] -> job key prefix, ARGV[2] -> lock key prefix, ARGV[3] -> worker id (the claimer's)
-- ARGV[4] -> reason (kept in the history)
-- ARGV[5..] -> pairs: job id, lease token
-- Returns: one integer per pair: 1 released, 0 not the lease holder (nothing changed).
-- Errors: none of its own.
local ready_key, processing_key, stats_key = KEYS[1], KEYS[2], KEYS[3]
local job_prefix, lock_prefix, worker, reason = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local now = now_ms()
local result, released, records = {}, {}, {}

for i = 5, #ARGV, 2 do
  local id, lease = ARGV[i], ARGV[i + 1]
  local f = redis.call('HMGET', job_prefix .. id, 'status', 'lease', 'attempt', 'resource_key',
    'events', 'worker')
  if f[1] == 'processing' and f[2] == lease and f[6] == worker then
    released[#released + 1] = id
    records[#records + 1] = {id, lease, f}
    result[#result + 1] = 1
  else
    result[#result + 1] = 0
  end
end
if #released == 0 then return result end

-- ZREM first: it cannot grow memory, so a Redis at maxmemory still admits the release.
zrem_all(processing_key, released)
for _, record in ipairs(records) do
  local id, lease, f = record[1], record[2], record[3]
  local attempt = math.max((tonumber(f[3]) or 1) - 1, 0)
  -- The history names the run released (f[3]); the counter steps back, so the next claim reuses it.
  local n, hfield, hvalue = history_entry(f[5], 'released', now, f[3], worker, reason)
  redis.call('HSET', job_prefix .. id, 'status', 'queued', 'attempt', attempt, 'updated_at', now,
    'queued_at', now, 'events', n, hfield, hvalue)
  redis.call('RPUSH', ready_key, id)
  release_lock(lock_prefix, f[4], id .. ':' .. lease)
end
redis.call('HINCRBY', stats_key, 'released', #released)
return result
