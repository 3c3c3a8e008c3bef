-- extend_lease: the worker heartbeat. Extends the leases (and resource locks) of the jobs a
-- worker holds and the locks it keeps for runs still going after their job was settled, and
-- refreshes the worker's registry entry, in one round trip.
-- KEYS[1] -> <prefix>:{Q}:processing     (ZSET)
-- KEYS[2] -> <prefix>:{Q}:workers        (ZSET, worker id -> last beat ms)
-- KEYS[3] -> <prefix>:{Q}:worker:<wid>   (String, JSON registry entry)
-- KEYS[4] -> <prefix>:{Q}:field_readers  (ZSET, as KEYS[2]: this worker claims queued fields)
-- Undeclared keys under the same {Q} tag: job hashes and resource locks.
-- ARGV[1] -> lease_ms (new deadline = now + lease_ms; never moved backwards)
-- ARGV[2] -> worker id
-- ARGV[3] -> registry entry (JSON text; the script adds nothing to it)
-- ARGV[4] -> registry_ttl_ms
-- ARGV[5] -> job key prefix, ARGV[6] -> lock key prefix
-- ARGV[7] -> number of leases that follow
-- ARGV[8..] -> pairs: job id, lease token (the leases)
-- then     -> pairs: resource key, '<id>:<lease>' (kept locks: runs still going, job settled)
-- Returns: {now_ms, then one integer per lease: 1 extended, 0 lost (not the current lease, its
--          deadline passed, or another job owns the resource now); then one per kept lock:
--          1 extended, 0 lost (another job owns the resource now, or the lock was freed by
--          its unlock)}
-- Errors: none of its own.
local processing_key, workers_key, worker_key, field_readers_key = KEYS[1], KEYS[2], KEYS[3],
  KEYS[4]
local lease_ms, worker, entry, ttl_ms = tonumber(ARGV[1]), ARGV[2], ARGV[3], tonumber(ARGV[4])
local job_prefix, lock_prefix, n_leases = ARGV[5], ARGV[6], tonumber(ARGV[7])
local now = now_ms()
local deadline = now + lease_ms
local result = {now}

-- PEXPIRE first: a write that cannot grow memory admits the script when Redis is at
-- maxmemory (noeviction), so leases keep being extended while memory is tight.
redis.call('PEXPIRE', worker_key, ttl_ms)
redis.call('SET', worker_key, entry, 'PX', ttl_ms)
redis.call('ZADD', workers_key, now, worker)
-- Producers write queued fields only while every registered worker is in this set too
-- (enqueue.lua): a worker of an earlier version would drop a job it finds only as a field.
redis.call('ZADD', field_readers_key, now, worker)

-- Holds the lock under `token`: extended (never shortened), taken back if it expired and
-- nobody took it (when `still_wanted()` says the run still needs it), or false when another
-- job owns the resource now.
local function keep_lock(lock_key, token, still_wanted)
  local holder, wrong_type = lock_holder(lock_key)
  if holder == token then
    -- Never shorten the lock (PEXPIRE GT needs Redis 7; this also runs on 6.2).
    if redis.call('PTTL', lock_key) < lease_ms then redis.call('PEXPIRE', lock_key, lease_ms) end
    return true
  elseif not holder and not wrong_type and still_wanted() then
    redis.call('SET', lock_key, token, 'PX', lease_ms)
    return true
  end
  return false
end

local function always() return true end

local ids = {}
for i = 8, 7 + 2 * n_leases, 2 do ids[#ids + 1] = ARGV[i] end
local deadlines = zmscore_all(processing_key, ids)
for j, id in ipairs(ids) do
  local lease = ARGV[7 + 2 * j]
  local job_key = job_prefix .. id
  local f = read_fields(job_key, 'status', 'lease', 'worker', 'resource_key', 'events', 'attempt',
    'extended_lease')
  local current = deadlines[j] and tonumber(deadlines[j])
  local ok = 0
  -- A lease past its deadline is gone even if no reaper has requeued it yet: its worker has
  -- stopped trusting it too, and another job may have taken its resource meanwhile.
  if f[1] == 'processing' and f[2] == lease and f[3] == worker and current and current >= now
      and (not f[4] or keep_lock(lock_prefix .. f[4], id .. ':' .. lease, always)) then
    ok = 1
    redis.call('ZADD', processing_key, 'XX', 'GT', deadline, id)
    if f[7] == lease then
      -- One history entry per attempt: a long job would otherwise push its own claim out
      -- of the 32-entry ring. Later beats only stamp the time.
      redis.call('HSET', job_key, 'updated_at', now, 'extended_at', now)
    else
      local n, hfield, hvalue = history_entry(f[5], 'extended', now, f[6], SAME_WORKER, nil)
      redis.call('HSET', job_key, 'updated_at', now, 'extended_at', now, 'extended_lease', lease,
        'events', n, hfield, hvalue)
    end
  end
  result[#result + 1] = ok
end

-- A kept lock that is gone is taken back only while its record still names it (lock_kept):
-- this beat may have left before its thread returned, and the unlock that followed has
-- already freed the lock for the next job on the resource.
for i = 8 + 2 * n_leases, #ARGV, 2 do
  local token = ARGV[i + 1]
  local id, lease = string.match(token, '^(.*):([^:]*)$')
  local function still_wanted()
    return id ~= nil and read_fields(job_prefix .. id, 'lock_kept')[1] == lease
  end
  result[#result + 1] = keep_lock(lock_prefix .. ARGV[i], token, still_wanted) and 1 or 0
end
return result
