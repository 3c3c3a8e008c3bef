-- reap: one reaper pass. Requeues jobs whose lease expired (the attempt counts: a job that
-- keeps killing its worker ends in dead), promotes due retries and delayed jobs, drops
-- registry entries of workers whose entry expired, moves the dead ids of the list older
-- versions kept into the dead-letter set, and deletes dead letters past their retention.
-- KEYS[1] -> <prefix>:{Q}:queue         (List)
-- KEYS[2] -> <prefix>:{Q}:processing    (ZSET)
-- KEYS[3] -> <prefix>:{Q}:retry         (ZSET)
-- KEYS[4] -> <prefix>:{Q}:dead_letters  (ZSET, id -> when it died, microseconds)
-- KEYS[5] -> <prefix>:{Q}:stats         (Hash)
-- KEYS[6] -> <prefix>:{Q}:reaper        (String, pass lock)
-- KEYS[7] -> <prefix>:{Q}:workers       (ZSET)
-- KEYS[8] -> <prefix>:{Q}:dead          (List: dead ids as older versions kept them; emptied)
-- KEYS[9] -> <prefix>:{Q}:queued        (Hash: records of jobs not claimed yet; a delayed one
--            is promoted by moving its id)
-- KEYS[10] -> <prefix>:{Q}:field_readers (ZSET: the workers of KEYS[7] that claim queued fields)
-- KEYS[11] -> <prefix>:{Q}:earlier_workers (String: set for an hour whenever a worker of an
--             earlier version is registered, as enqueue does)
-- Undeclared keys under the same {Q} tag: job hashes, resource locks, worker entries,
-- idempotency keys.
-- ARGV[1] -> batch limit (per kind of work)
-- ARGV[2] -> pass_lock_ms: 0 runs unconditionally, else only if the pass lock is free
-- ARGV[3] -> holder name for the pass lock
-- ARGV[4] -> job key prefix, ARGV[5] -> lock key prefix, ARGV[6] -> worker key prefix
-- ARGV[7] -> idempotency key prefix
-- ARGV[8] -> dead_ttl_ms: dead letters older than this are deleted (0 keeps them forever)
-- ARGV[9] -> waiting key prefix (optional): a job dead at the expiry of its lease frees its
--            resource, and the job that has waited longest for it is woken, as an ack does
-- Returns: {ran (0 = another process holds the pass lock), requeued, dead, promoted,
--           workers_dropped, more (1 when a batch limit was hit), dead_expired}
-- Errors: none of its own.
local ready_key, processing_key, retry_key, dead_key, stats_key, reaper_key, workers_key,
  legacy_dead_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local queued_key, field_readers_key, earlier_key = KEYS[9], KEYS[10], KEYS[11]
local limit, pass_lock_ms, holder = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local job_prefix, lock_prefix, worker_prefix = ARGV[4], ARGV[5], ARGV[6]
local idem_prefix, dead_ttl_ms, waiting_prefix = ARGV[7], tonumber(ARGV[8]), ARGV[9]

if pass_lock_ms > 0 then
  -- pcall: at maxmemory (noeviction) Redis refuses a SET as the first write of a script. The
  -- lock only spares other workers a pass; recovery must go on when memory is full.
  local taken = redis.pcall('SET', reaper_key, holder, 'NX', 'PX', pass_lock_ms)
  if not taken then return {0, 0, 0, 0, 0, 0, 0} end
end
local now = now_ms()
local requeued, dead = 0, 0

local expired = redis.call('ZRANGEBYSCORE', processing_key, '-inf', '(' .. now, 'LIMIT', 0, limit)
zrem_all(processing_key, expired)
for _, id in ipairs(expired) do
  local job_key = job_prefix .. id
  -- Reads through pcall with defaults: an error here would strand the rest of the batch,
  -- already removed from the processing set.
  local f = read_fields(job_key, 'status', 'lease', 'attempt', 'max_attempts', 'resource_key',
    'events', 'worker')
  if f[1] == 'processing' then
    local outcome = expire_lease(job_key, id, f, now, ready_key, dead_key, lock_prefix)
    if outcome == 'dead' then
      dead = dead + 1
      -- A requeued job takes its resource again itself; a dead one leaves it to the next, once
      -- the lock is free: freed here, or (the usual case: the lock's TTL is the lease's) expired
      -- with the lease. Not when another job has taken it since.
      if waiting_prefix and f[5] then
        local holder, wrong_type = lock_holder(lock_prefix .. f[5])
        if not holder and not wrong_type then
          wake_next_waiter(waiting_prefix .. f[5], ready_key, retry_key, job_prefix, now)
        end
      end
    else
      requeued = requeued + 1
    end
  end
end
if requeued > 0 then redis.call('HINCRBY', stats_key, 'lease_expired', requeued) end
if dead > 0 then
  redis.call('HINCRBY', stats_key, 'dead', dead)
  redis.call('HINCRBY', stats_key, 'lease_expired', dead)
end

local promoted = promote_due(ready_key, retry_key, queued_key, job_prefix, now, limit)

-- Registry entries expire by TTL; both indexes lose members whose entry is gone (each on its
-- own: a reaper of an earlier version prunes only `workers`).
local function prune(index_key)
  local pruned = 0
  local stale = redis.call('ZRANGEBYSCORE', index_key, '-inf', now - 1000, 'LIMIT', 0, limit)
  for _, wid in ipairs(stale) do
    if redis.call('EXISTS', worker_prefix .. wid) == 0 then
      redis.call('ZREM', index_key, wid)
      pruned = pruned + 1
    end
  end
  return pruned
end
local dropped = prune(workers_key)
prune(field_readers_key)
-- Seen here too, every pass: an earlier worker registered while nothing was enqueued must
-- still keep fields off after it freezes and is pruned.
if earlier_workers_registered(workers_key, field_readers_key) then
  redis.call('SET', earlier_key, now, 'PX', EARLIER_WORKER_WINDOW_MS)
end

-- Older versions kept dead ids in a list (O(N) to remove one), and may still push there
-- during a rolling upgrade: move them over, oldest first, scored by when they died.
local migrated = 0
if redis.call('TYPE', legacy_dead_key)['ok'] == 'list' then
  for _, id in ipairs(redis.call('RPOP', legacy_dead_key, limit) or {}) do
    local f = read_fields(job_prefix .. id, 'status', 'died_at')
    if f[1] == 'dead' then
      redis.call('ZADD', dead_key, 'NX', (tonumber(f[2]) or now) * 1000, id)
    end
    migrated = migrated + 1
  end
end

-- Dead letters are kept for dead_ttl_ms, then deleted with their idempotency key.
local dead_expired = 0
if dead_ttl_ms > 0 then
  local old = redis.call('ZRANGEBYSCORE', dead_key, '-inf', (now - dead_ttl_ms) * 1000,
    'LIMIT', 0, limit)
  if #old > 0 then
    zrem_all(dead_key, old)
    for _, id in ipairs(old) do
      local job_key = job_prefix .. id
      local f = read_fields(job_key, 'status', 'idempotency_key')
      if f[1] == 'dead' then
        drop_idempotency_key(idem_prefix, f[2], id)
        redis.call('DEL', job_key)
      end
    end
    dead_expired = #old
    redis.call('HINCRBY', stats_key, 'dead_expired', dead_expired)
  end
end

local more = 0
if #expired == limit or promoted == limit or migrated == limit or dead_expired == limit then
  more = 1
end
return {1, requeued, dead, promoted, dropped, more, dead_expired}
