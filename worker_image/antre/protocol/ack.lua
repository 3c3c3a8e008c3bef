-- ack: settle jobs as done, in a batch; each needs its current lease token (fencing).
-- KEYS[1] -> <prefix>:{Q}:processing  (ZSET)
-- KEYS[2] -> <prefix>:{Q}:stats       (Hash)
-- Undeclared keys under the same {Q} tag: job hashes, idempotency keys, resource locks.
-- ARGV[1] -> done_ttl_ms (0 deletes the record at once)
-- ARGV[2] -> idempotency_done_ttl_ms (how long a completed key keeps deduplicating)
-- ARGV[3] -> job key prefix, ARGV[4] -> idempotency key prefix, ARGV[5] -> lock key prefix
-- ARGV[6] -> worker id (the claimer's: part of the fence, with the lease token)
-- ARGV[7..] -> pairs: job id, lease token
-- Returns: one integer per pair: 1 acked (or already acked with this lease: a retry whose first
--          reply was lost), 0 not the lease holder (the ack changed nothing).
-- Errors: none of its own.
local processing_key, stats_key = KEYS[1], KEYS[2]
local done_ttl_ms, idem_done_ttl_ms = tonumber(ARGV[1]), tonumber(ARGV[2])
local job_prefix, idem_prefix, lock_prefix, worker = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local now = now_ms()
local result, settled, records = {}, {}, {}

-- First pass: fencing. A lease is ours when the job is processing under our token AND was
-- claimed by this worker (a rolled-back counter after a failover cannot fake both).
for i = 7, #ARGV, 2 do
  local id, lease = ARGV[i], ARGV[i + 1]
  local f = redis.call('HMGET', job_prefix .. id, 'status', 'lease', 'idempotency_key',
    'resource_key', 'events', 'attempt', 'outcome', 'worker')
  if f[1] == 'processing' and f[2] == lease and f[8] == worker then
    settled[#settled + 1] = id
    records[#records + 1] = {id, lease, f}
    result[#result + 1] = 1
  elseif f[1] == 'done' and f[2] == lease and f[7] == 'succeeded' and f[8] == worker then
    result[#result + 1] = 1  -- a retried ack whose first reply was lost
  else
    result[#result + 1] = 0
  end
end
if #settled == 0 then return result end

-- ZREM first: a write that cannot grow memory admits the script when Redis is at maxmemory
-- (noeviction), so a full Redis can still ack, which is what frees memory.
zrem_all(processing_key, settled)
for _, record in ipairs(records) do
  local id, lease, f = record[1], record[2], record[3]
  local job_key = job_prefix .. id
  if done_ttl_ms > 0 then
    local n, hfield, hvalue = history_entry(f[5], 'acked', now, f[6], worker, nil)
    redis.call('HSET', job_key, 'status', 'done', 'outcome', 'succeeded', 'updated_at', now,
      'finished_at', now, 'events', n, hfield, hvalue)
    redis.call('PEXPIRE', job_key, done_ttl_ms)
  else
    redis.call('DEL', job_key)  -- nothing kept: the cheapest ack (claim 2 + ack 2 commands)
  end
  if f[3] then
    redis.call('SET', idem_prefix .. f[3], id .. '|done', 'PX', idem_done_ttl_ms)
  end
  release_lock(lock_prefix, f[4], id .. ':' .. lease)
end
redis.call('HINCRBY', stats_key, 'done', #settled)
return result
