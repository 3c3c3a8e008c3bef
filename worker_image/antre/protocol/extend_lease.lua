-- extend_lease: the worker heartbeat. Extends the leases (and resource locks) of the jobs a
-- worker holds, and refreshes the worker's registry entry, in one round trip.
-- KEYS[1] -> <prefix>:{Q}:processing     (ZSET)
-- KEYS[2] -> <prefix>:{Q}:workers        (ZSET, worker id -> last beat ms)
-- KEYS[3] -> <prefix>:{Q}:worker:<wid>   (String, JSON registry entry)
-- Undeclared keys under the same {Q} tag: job hashes and resource locks.
-- ARGV[1] -> lease_ms (new deadline = now + lease_ms; never moved backwards)
-- ARGV[2] -> worker id
-- ARGV[3] -> registry entry (JSON text; the script adds nothing to it)
-- ARGV[4] -> registry_ttl_ms
-- ARGV[5] -> job key prefix, ARGV[6] -> lock key prefix
-- ARGV[7..] -> pairs: job id, lease token
-- Returns: {now_ms, then one integer per pair: 1 extended, 0 lease lost}
-- Errors: none of its own.
local processing_key, workers_key, worker_key = KEYS[1], KEYS[2], KEYS[3]
local lease_ms, worker, entry, ttl_ms = tonumber(ARGV[1]), ARGV[2], ARGV[3], tonumber(ARGV[4])
local job_prefix, lock_prefix = ARGV[5], ARGV[6]
local now = now_ms()
local deadline = now + lease_ms
local result = {now}

-- PEXPIRE first: a write that cannot grow memory admits the script when Redis is at
-- maxmemory (noeviction), so leases keep being extended while memory is tight.
redis.call('PEXPIRE', worker_key, ttl_ms)
redis.call('SET', worker_key, entry, 'PX', ttl_ms)
redis.call('ZADD', workers_key, now, worker)

for i = 7, #ARGV, 2 do
  local id, lease = ARGV[i], ARGV[i + 1]
  local job_key = job_prefix .. id
  local f = redis.call('HMGET', job_key, 'status', 'lease', 'resource_key', 'events', 'attempt',
    'extended_lease', 'worker')
  local ok = 0
  if f[1] == 'processing' and f[2] == lease and f[7] == worker then
    ok = 1
    local token = id .. ':' .. lease
    if f[3] then
      local lock_key = lock_prefix .. f[3]
      local holder = redis.call('GET', lock_key)
      if holder == token then
        -- Never shorten the lock (PEXPIRE GT needs Redis 7; this also runs on 6.2).
        if redis.call('PTTL', lock_key) < lease_ms then redis.call('PEXPIRE', lock_key, lease_ms) end
      elseif not holder then
        -- Expired between beats but nobody took it: take it back.
        redis.call('SET', lock_key, token, 'PX', lease_ms)
      else
        ok = 0  -- another job owns the resource now: this run must not go on
      end
    end
    if ok == 1 then
      redis.call('ZADD', processing_key, 'XX', 'GT', deadline, id)
      if f[6] == lease then
        -- One history entry per attempt: a long job would otherwise push its own claim out
        -- of the 32-entry ring. Later beats only stamp the time.
        redis.call('HSET', job_key, 'updated_at', now, 'extended_at', now)
      else
        local n, hfield, hvalue = history_entry(f[4], 'extended', now, f[5], worker, nil)
        redis.call('HSET', job_key, 'updated_at', now, 'extended_at', now, 'extended_lease', lease,
          'events', n, hfield, hvalue)
      end
    end
  end
  result[#result + 1] = ok
end
return result
