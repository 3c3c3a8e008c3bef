-- ack: settle jobs as done, in a batch; each needs its lease to be held (fencing).
-- KEYS[1] -> <prefix>:{Q}:processing    (ZSET, id -> lease deadline ms)
-- KEYS[2] -> <prefix>:{Q}:stats         (Hash)
-- KEYS[3] -> <prefix>:{Q}:queue         (List; an expired lease goes back here)
-- KEYS[4] -> <prefix>:{Q}:dead_letters  (ZSET; an expired lease of a last attempt)
-- Undeclared keys under the same {Q} tag: job records (a Hash while live, packed once done or
-- dead: see _prelude.lua), idempotency keys, resource locks.
-- ARGV[1] -> done_ttl_ms (0 keeps no record: only a stub that answers a retried ack)
-- ARGV[2] -> idempotency_done_ttl_ms (how long a completed key keeps deduplicating)
-- ARGV[3] -> job key prefix, ARGV[4] -> idempotency key prefix, ARGV[5] -> lock key prefix
-- ARGV[6] -> worker id (the claimer's: part of the fence, with the lease token)
-- ARGV[7] -> stub_ttl_ms: with done_ttl_ms 0, how long the stub lives (the worker's retry window)
-- ARGV[8..] -> pairs: job id, lease token
-- KEYS[5] -> <prefix>:{Q}:retry (ZSET; optional): with it, ARGV[8] is the waiting key prefix
--            (claim.lua) and the pairs start at ARGV[9]; a run that freed a resource lock wakes
--            the job that has waited longest for that resource (wake_next_waiter)
-- Returns: {now_ms, then one integer per pair}: 1 acked. That includes an ack retried after its
--          reply was lost (the job is already done with this lease), and a late ack of a last
--          attempt whose lease had expired: the run finished, so the job ends done, not dead.
--          0 refused, nothing settled: not the lease holder (requeued, settled or claimed by
--          another worker), or the resource lock is no longer the run's own; or the lease
--          deadline passed, in which case the job is requeued here as the reaper would (the
--          attempt counts) and runs again.
--          A pair given twice in one call is settled once; both get its answer.
-- Errors: none of its own.
local processing_key, stats_key, ready_key, dead_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local done_ttl_ms, idem_done_ttl_ms = tonumber(ARGV[1]), tonumber(ARGV[2])
local job_prefix, idem_prefix, lock_prefix, worker = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local stub_ttl_ms = tonumber(ARGV[7])
local retry_key, waiting_prefix, first_pair = KEYS[5], nil, 8
if retry_key then waiting_prefix, first_pair = ARGV[8], 9 end
local now = now_ms()
-- The same lease twice in one call is one ack: each pair is settled once, and a repeat gets
-- the answer of its first occurrence (slots: where a pair's answer goes in the reply).
local reply, ids, leases, slots = {now}, {}, {}, {}
local first_slot, repeats = {}, {}
for i = first_pair, #ARGV, 2 do
  local slot, pair = (i - first_pair) / 2 + 2, ARGV[i] .. '|' .. ARGV[i + 1]
  if first_slot[pair] then
    repeats[slot] = first_slot[pair]
  else
    first_slot[pair] = slot
    ids[#ids + 1], leases[#leases + 1], slots[#slots + 1] = ARGV[i], ARGV[i + 1], slot
  end
end
local function answer()
  for slot, first in pairs(repeats) do reply[slot] = reply[first] end
  return reply
end
if #ids == 0 then return reply end
local deadlines = zmscore_all(processing_key, ids)

-- What the first pass reads of a record: f[1..8], and for a record to keep (done_ttl_ms > 0)
-- all its fields, {flat = HGETALL's list, by_name = field -> value}: it is packed from them with
-- the ack's changes added, rather than written with HSET and read back. A packed record (a late
-- ack of a dead job) has no fields to read that way: read_fields unpacks it.
local ACK_FIELDS = {'status', 'lease', 'worker', 'resource_key', 'idempotency_key', 'events',
  'attempt', 'outcome'}
local function read_record(job_key)
  if done_ttl_ms > 0 then
    local flat = redis.pcall('HGETALL', job_key)
    if not flat.err then
      local by_name, f = {}, {}
      for i = 1, #flat, 2 do by_name[flat[i]] = flat[i + 1] end
      for i, name in ipairs(ACK_FIELDS) do f[i] = by_name[name] or false end
      return f, {flat = flat, by_name = by_name}
    end
  end
  return read_fields(job_key, unpack(ACK_FIELDS)), nil
end

-- First pass, reads only: which runs settle as done, and which leases have expired.
local settled, expired, late, removed = {}, {}, {}, {}
for j, id in ipairs(ids) do
  local lease = leases[j]
  local job_key = job_prefix .. id
  local f, fields = read_record(job_key)
  local ours = f[2] == lease and f[3] == worker
  local ok = 0
  if ours and f[1] == 'processing' then
    local deadline = deadlines[j] and tonumber(deadlines[j])
    if deadline and deadline < now then
      -- Not trusted as held any more: the lease is treated as the reaper would treat it.
      f[9] = read_fields(job_key, 'max_attempts')[1]
      expired[#expired + 1] = {slots[j], id, lease, f, fields}
      removed[#removed + 1] = id
    elseif lease_held(f, id, lease, worker, deadline, now, lock_prefix) then
      settled[#settled + 1] = {slots[j], id, lease, f, fields}
      removed[#removed + 1] = id
      ok = 1
    end
  elseif ours and f[1] == 'done' and f[8] == 'succeeded' then
    ok = 1  -- a retried ack whose first reply was lost
  elseif ours and f[1] == 'dead' and read_fields(job_key, 'expired_lease')[1] == lease then
    late[#late + 1] = {j, id, lease, f}  -- its last attempt expired; this ack says it finished
    removed[#removed + 1] = id
    ok = 1
  end
  reply[slots[j]] = ok
end
if #removed == 0 then return answer() end

-- ZREM first: a write that cannot grow memory admits the script when Redis is at maxmemory
-- (noeviction), so a full Redis can still ack, which is what frees memory. (A late ack's id is
-- not in the processing set; ZREM of it there is harmless.)
zrem_all(processing_key, removed)

-- `fields` is the whole record as read_record read it, or nil.
local function settle_done(id, lease, f, note, fields)
  local job_key = job_prefix .. id
  local digest = nil
  if f[5] and fields then
    digest = fields.by_name.idempotency_digest
  elseif f[5] then
    digest = read_fields(job_key, 'idempotency_digest')[1]
  end
  if done_ttl_ms > 0 then
    local n, hfield, hvalue = history_entry(f[6], 'acked', now, f[7], SAME_WORKER, note)
    local changes = {'status', 'done', 'outcome', 'succeeded', 'updated_at', now,
      'finished_at', now, 'events', n, hfield, hvalue}
    -- While the new entry's ring slot is free (until the ring wraps), the fields as read plus
    -- the changes are the record HSET would leave: pack_record keeps the last value of a
    -- field it knows by name, but takes every h:<slot> given as an entry.
    if fields and fields.by_name[hfield] == nil then
      local text = not note and packed_one_run(fields.by_name, #fields.flat / 2, now)
      if not text then
        local flat = fields.flat
        for _, value in ipairs(changes) do flat[#flat + 1] = value end
        text = pack_record(flat)
      end
      redis.call('SET', job_key, text, 'PX', decimal(done_ttl_ms))
    else
      redis.call('HSET', job_key, unpack(changes))
      keep_finished(job_key, done_ttl_ms)
    end
  else
    -- Nothing kept but a stub, so a retried ack (its first reply lost) is answered truthfully.
    redis.call('DEL', job_key)
    redis.call('HSET', job_key, 'status', 'done', 'outcome', 'succeeded', 'lease', lease,
      'worker', worker)
    redis.call('PEXPIRE', job_key, stub_ttl_ms)
  end
  if f[5] then
    redis.call('SET', idem_prefix .. f[5], marker_text(id, digest, true), 'PX',
      decimal(idem_done_ttl_ms))
  end
end

local LATE = 'acknowledged after its lease expired: its last attempt finished'
local done, requeued = #settled, 0
for _, record in ipairs(settled) do
  local id, lease, f, fields = record[2], record[3], record[4], record[5]
  settle_done(id, lease, f, nil, fields)
  -- lease_held found the lock to be this run's: free it, and let the next job on it run.
  if f[4] then
    redis.call('DEL', lock_prefix .. f[4])
    if waiting_prefix then
      wake_next_waiter(waiting_prefix .. f[4], ready_key, retry_key, job_prefix, now)
    end
  end
end
for _, record in ipairs(expired) do
  local slot, id, lease, f, fields = record[1], record[2], record[3], record[4], record[5]
  if (tonumber(f[7]) or 0) < (tonumber(f[9]) or 0) then
    expire_lease(job_prefix .. id, id, {f[1], f[2], f[7], f[9], f[4], f[6], f[3]}, now,
      ready_key, dead_key, lock_prefix)
    requeued = requeued + 1
  else
    -- Its last attempt: the reaper would dead-letter it, but this ack says the run finished.
    release_lock(lock_prefix, f[4], id .. ':' .. lease)
    settle_done(id, lease, f, LATE, fields)
    -- It succeeded, so it wakes the next job on its resource as above, once the lock is free:
    -- freed here or, the usual case (the lock's TTL is the lease's), expired with the lease;
    -- not when another job has taken it since.
    if f[4] and waiting_prefix then
      local holder, wrong_type = lock_holder(lock_prefix .. f[4])
      if not holder and not wrong_type then
        wake_next_waiter(waiting_prefix .. f[4], ready_key, retry_key, job_prefix, now)
      end
    end
    done = done + 1
    reply[slot] = 1
  end
end
for _, record in ipairs(late) do
  local id, lease, f = record[2], record[3], record[4]
  redis.call('ZREM', dead_key, id)
  unpack_in_place(job_prefix .. id, id)
  settle_done(id, lease, f, LATE)
  done = done + 1
end
if requeued > 0 then redis.call('HINCRBY', stats_key, 'lease_expired', requeued) end
if done > 0 then redis.call('HINCRBY', stats_key, 'done', done) end
return answer()
