-- claim: lease up to N ready jobs to one worker, after promoting due retries.
-- KEYS[1] -> <prefix>:{Q}:queue       (List, ready ids; popped from the right)
-- KEYS[2] -> <prefix>:{Q}:processing  (ZSET, id -> lease deadline ms)
-- KEYS[3] -> <prefix>:{Q}:retry       (ZSET, id -> due ms)
-- KEYS[4] -> <prefix>:{Q}:stats       (Hash)
-- KEYS[5] -> <prefix>:{Q}:dead_letters (ZSET; a malformed job, or one whose resource stays busy
--            too long)
-- KEYS[6] -> <prefix>:{Q}:queued      (Hash, id -> packed record of a job enqueued and not
--            claimed yet; the claim turns the field into the job's Hash)
-- KEYS[7] -> <prefix>:{Q}:workers     (ZSET, worker id -> last beat ms; read only)
-- KEYS[8] -> <prefix>:{Q}:claim:<worker id> (String, optional: the worker's last claim that
--            leased jobs, '<claim id>|<claimed at ms>|<id>|<lease>|...', kept for a lease)
-- Undeclared keys, all under the same {Q} hash tag, so Cluster-safe: the job hashes
-- <prefix>:{Q}:job:<id> (a popped id's record is its queued field, or else its Hash: a job
-- requeued, retried or replayed, or written by an older version or a foreign producer),
-- idempotency keys <prefix>:{Q}:idem:<k> and resource locks <prefix>:{Q}:lock:<r>; their names
-- are only known after the pop.
-- ARGV[1] -> max jobs to claim
-- ARGV[2] -> lease_ms (visibility timeout)
-- ARGV[3] -> worker id
-- ARGV[4] -> job key prefix, ARGV[5] -> idempotency key prefix, ARGV[6] -> lock key prefix
-- ARGV[7] -> promote_limit (due retries moved per call)
-- ARGV[8] -> lock_defer_ms (how long a job waits when its resource is busy)
-- ARGV[9] -> lock_max_deferrals (after that many waits the job goes to dead)
-- ARGV[10] -> done_ttl_ms (how long a finished record is kept)
-- ARGV[11] -> claim id (optional, with KEYS[8]; '' for none): a claim sent again with the id of
--             the worker's last claim (its reply was lost) leases nothing new: it answers that
--             claim's leases the worker still holds
-- ARGV[12] -> waiting key prefix (optional): a job deferred for a busy resource is recorded in
--             <prefix>:{Q}:waiting:<resource> (ZSET, id -> first deferral: ms * 1000 + its order
--             in the call), where the ack that frees the lock finds it (wake_next_waiter)
-- Returns: {0, -1, now_ms, 1} when the worker's last beat (KEYS[7]) is older than lease_ms:
--          nothing is promoted, popped or written; else {0, next_due_ms or -1, now_ms} when
--          nothing was popped, else
--          {1, n_duplicates, next_due_ms or -1, now_ms,
--           then 5 values per duplicate settled without running: id, type, idempotency_key,
--           attempt (the runs it had), resource_key or '';
--           then 10 values per leased job: id, type, payload, attempt, max_attempts, lease,
--           idempotency_key, resource_key, created_at, headers};
--          {2, claimed_at_ms, now_ms, then 10 values per job as above} for a claim sent again:
--          the leases of the first sending still held (status, lease, worker, deadline, lock);
--          it writes only the claim record's own expiry again, for WAIT (durable claims)
-- Errors: none of its own. Ids whose record vanished or is no longer queued (a cancelled job
--         left in the list) are dropped; a queued record without a type or with unreadable
--         counters is dead-lettered ('malformed record'), never thrown on, because a runtime
--         error would strand the jobs already popped.
local ready_key, processing_key, retry_key, stats_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local dead_key, queued_key, workers_key = KEYS[5], KEYS[6], KEYS[7]
local max_jobs, lease_ms, worker = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local job_prefix, idem_prefix, lock_prefix = ARGV[4], ARGV[5], ARGV[6]
local promote_limit, lock_defer_ms = tonumber(ARGV[7]), tonumber(ARGV[8])
local lock_max_deferrals, done_ttl_ms = tonumber(ARGV[9]), tonumber(ARGV[10])
local now = now_ms()

-- A worker Redis has not heard from for a whole lease is frozen or cut off: the leases of its
-- last beat have expired and are being reaped. It gets no new ones; the claim its idle wait sent
-- before the freeze would otherwise lease jobs (even the ones just reaped from it) to a process
-- that cannot start them, and they would wait out another lease. A caller that never beats
-- (not in KEYS[7]) is served as before.
local last_beat = tonumber(redis.call('ZSCORE', workers_key, worker))
if last_beat and now - last_beat > lease_ms then return {0, -1, now, 1} end

local claim_key, claim_id, waiting_prefix = KEYS[8], ARGV[11], ARGV[12]
if claim_id == '' then claim_id = nil end
if claim_key and claim_id then
  local last = redis.call('GET', claim_key)
  if last and string.sub(last, 1, #claim_id + 1) == claim_id .. '|' then
    -- The same claim again: its first sending ran, its reply was lost. Answer what it leased.
    local parts = {}
    for part in string.gmatch(string.sub(last, #claim_id + 2), '[^|]+') do
      parts[#parts + 1] = part
    end
    local claimed_at, ids, leases = tonumber(parts[1]), {}, {}
    for i = 2, #parts - 1, 2 do
      ids[#ids + 1], leases[#leases + 1] = parts[i], parts[i + 1]
    end
    local reply = {2, claimed_at, now}
    -- A write, though nothing changes: a durable claim's WAIT counts the replicas that have
    -- this connection's last write, and the replication stream is in order, so this one
    -- confirms the first sending's writes too (a replay that wrote nothing would be confirmed
    -- by the replicas before they had the leases it answers).
    redis.call('PEXPIRE', claim_key, math.max(redis.call('PTTL', claim_key), 1))
    local deadlines = zmscore_all(processing_key, ids)
    for j, id in ipairs(ids) do
      local f = read_fields(job_prefix .. id, 'status', 'lease', 'worker', 'resource_key',
        'type', 'payload', 'attempt', 'max_attempts', 'idempotency_key', 'created_at', 'headers')
      if lease_held(f, id, leases[j], worker, deadlines[j], now, lock_prefix) then
        -- Numbers as the first sending answered them (a foreign record may hold "3.0").
        for _, value in ipairs({id, f[5], f[6], tonumber(f[7]), tonumber(f[8]), f[2], f[9] or '',
            f[4] or '', tonumber(f[10]), f[11] or ''}) do
          reply[#reply + 1] = value
        end
      end
    end
    return reply
  end
end

promote_due(ready_key, retry_key, queued_key, job_prefix, now, promote_limit)

local ids = redis.call('RPOP', ready_key, max_jobs)
if not ids then
  local head = redis.call('ZRANGE', retry_key, 0, 0, 'WITHSCORES')
  if head[2] then return {0, tonumber(head[2]), now} end
  return {0, -1, now}
end

local deadline = now + lease_ms
local result = {}
local leased = {}
local dups, duplicates = {}, 0  -- 5 values per duplicate (the reply's), and how many
local deferred = 0

local function refuse(job_key, id, events, attempt, reason)
  dead_letter(job_key, dead_key, id, now, events, attempt, worker, reason)
  redis.call('HINCRBY', stats_key, 'dead', 1)
end

-- The Hash a job enqueued as a queued field becomes, written before any other change to it.
local function materialise(job_key, fresh)
  redis.call('HSET', job_key, unpack(flat_fields(fresh)))
end

-- A fresh job is a field of the queued Hash: it becomes the job's own Hash here (in the same
-- HSET as its claim when it runs). Any other id has its Hash already. The fields of the whole
-- batch are read in one HMGET and deleted in one HDEL at the end (in chunks: Lua's unpack has a
-- limit of a few thousand values). pcall, as below: a queued key of the wrong type (a hand
-- edit) reads as no field.
local queued_texts = {}
for first = 1, #ids, 1000 do
  local part = redis.pcall('HMGET', queued_key, unpack(ids, first, math.min(first + 999, #ids)))
  if part.err then break end
  for i, text in ipairs(part) do queued_texts[first + i - 1] = text end
end
local taken, taken_ids = {}, {}

for i, id in ipairs(ids) do
  local job_key = job_prefix .. id
  local f
  local queued_text = queued_texts[i]
  local fresh = nil
  -- An id popped twice in one call is taken from its field once; the second finds its Hash.
  if type(queued_text) == 'string' and not taken[id] then
    fresh = queued_record(queued_text, id)
    -- A job enqueued with a delay is due only once promote_due took its id out of `retry`. An
    -- id popped while it is still there is an older copy (a job cancelled while queued leaves
    -- its id in the list, and a producer may reuse the id): the job keeps its field and waits.
    if fresh.queued_at and redis.call('ZSCORE', retry_key, id) then
      fresh = nil
      f = {}
    else
      taken[id] = true
      taken_ids[#taken_ids + 1] = id
      f = {fresh.type, fresh.payload, fresh.attempt, fresh.max_attempts, fresh.lease,
        fresh.idempotency_key, fresh.resource_key, fresh.created_at, fresh.headers,
        fresh.events, fresh.status}
    end
  else
    -- pcall: a key of the wrong type must not abort the script with jobs already popped.
    f = read_fields(job_key, 'type', 'payload', 'attempt', 'max_attempts', 'lease',
      'idempotency_key', 'resource_key', 'created_at', 'headers', 'events', 'status',
      'lock_deferrals', 'lock_kept')
  end
  local job_type, status = f[1], f[11]
  local attempt, lease = tonumber(f[3]), tonumber(f[5])
  local max_attempts, created_at = tonumber(f[4]), tonumber(f[8])
  if status == 'queued' and not (job_type and attempt and lease and max_attempts and created_at
      and f[2]) then
    if fresh then materialise(job_key, fresh) end
    refuse(job_key, id, f[10], f[3], 'malformed record: type, attempt, lease, max_attempts, '
      .. 'created_at and payload must be set (see PROTOCOL.md)')
  elseif status == 'queued' then
    local idem, resource = f[6], f[7]
    attempt, lease = attempt + 1, lease + 1
    local outcome = 'run'
    local broken = nil
    if idem then
      local marker = redis.pcall('GET', idem_prefix .. idem)
      if type(marker) == 'table' and marker.err then
        broken = 'idempotency key ' .. idem .. ' holds the wrong Redis type'
      elseif marker and string.sub(marker, -5) == '|done' then
        outcome = 'duplicate'
      end
    end
    local token = id .. ':' .. decimal(lease)
    if not broken and outcome == 'run' and resource then
      local lock_key = lock_prefix .. resource
      local holder, wrong_type = lock_holder(lock_key)
      if wrong_type then
        broken = 'resource lock ' .. resource .. ' holds the wrong Redis type'
      -- A lock left by an earlier attempt of this same job belongs to a dead lease, unless
      -- that attempt's run may still be going (a handler thread past its timeout: lock_kept).
      elseif holder and (string.match(holder, '^([^:]+)') ~= id
          or holder == id .. ':' .. tostring(f[13])) then
        outcome = 'deferred'
      else
        redis.call('SET', lock_key, token, 'PX', decimal(lease_ms))
      end
    end
    if fresh and outcome ~= 'run' then materialise(job_key, fresh) end
    if broken then
      -- pcall above: a runtime error would strand every job popped in this call.
      outcome = 'broken'
      refuse(job_key, id, f[10], f[3], broken)
    end

    if outcome == 'run' then
      local n, hfield, hvalue = history_entry(f[10], 'claimed', now, attempt, worker, nil)
      -- decimal: a batch's jobs share these numbers; each is converted to text once.
      local attempt_text, lease_text, events_text = decimal(attempt), decimal(lease), decimal(n)
      if fresh then
        fresh.status, fresh.attempt, fresh.lease = 'processing', attempt_text, lease_text
        fresh.worker = worker
        fresh.updated_at, fresh.events, fresh[hfield] = decimal(now), events_text, hvalue
        materialise(job_key, fresh)
      elseif f[12] then
        -- The bound on waits for a busy resource is per wait, not over the job's whole life.
        redis.call('HSET', job_key, 'status', 'processing', 'attempt', attempt_text,
          'lease', lease_text, 'worker', worker, 'updated_at', decimal(now),
          'events', events_text, hfield, hvalue, 'lock_deferrals', 0)
      else
        redis.call('HSET', job_key, 'status', 'processing', 'attempt', attempt_text,
          'lease', lease_text, 'worker', worker, 'updated_at', decimal(now),
          'events', events_text, hfield, hvalue)
      end
      leased[#leased + 1] = decimal(deadline)
      leased[#leased + 1] = id
      result[#result + 1] = id
      result[#result + 1] = job_type
      result[#result + 1] = f[2]
      result[#result + 1] = attempt
      result[#result + 1] = max_attempts
      result[#result + 1] = lease
      result[#result + 1] = idem or ''
      result[#result + 1] = resource or ''
      result[#result + 1] = created_at
      result[#result + 1] = f[9] or ''
    elseif outcome == 'broken' then
      -- already dead-lettered
    elseif outcome == 'duplicate' then
      -- The key was completed by another run: settle without calling the handler.
      local n, hfield, hvalue = history_entry(f[10], 'duplicate', now, f[3], worker,
        'idempotency key ' .. idem .. ' already done')
      redis.call('HSET', job_key, 'status', 'done', 'outcome', 'duplicate', 'updated_at', now,
        'finished_at', now, 'events', n, hfield, hvalue)
      keep_finished(job_key, done_ttl_ms)
      dups[#dups + 1] = id
      dups[#dups + 1] = job_type
      dups[#dups + 1] = idem
      dups[#dups + 1] = f[3]
      dups[#dups + 1] = resource or ''
      duplicates = duplicates + 1
    else
      -- Contention is not failure: wait without spending an attempt, but not forever.
      local waits = (tonumber(f[12]) or 0) + 1
      if waits > lock_max_deferrals then
        refuse(job_key, id, f[10], f[3], 'resource ' .. resource .. ' stayed locked through '
          .. lock_max_deferrals .. ' deferrals')
        if waiting_prefix then redis.call('ZREM', waiting_prefix .. resource, id) end
      else
        local n, hfield, hvalue = history_entry(f[10], 'deferred', now, f[3], worker,
          'resource ' .. resource .. ' busy')
        redis.call('HSET', job_key, 'status', 'scheduled', 'lock_deferrals', waits,
          'updated_at', now, 'queued_at', now + lock_defer_ms, 'events', n, hfield, hvalue)
        redis.call('ZADD', retry_key, now + lock_defer_ms, id)
        deferred = deferred + 1
        if waiting_prefix then
          -- Its place in line is its first deferral (ms, then its order in this call: at most
          -- MAX_JOBS_PER_CALL, so below 1,000); the record outlives the re-check a bit.
          local waiting_key = waiting_prefix .. resource
          redis.call('ZADD', waiting_key, 'NX', now * 1000 + deferred, id)
          redis.call('PEXPIRE', waiting_key, 3 * lock_defer_ms + 1000)
        end
      end
    end
  end
end

-- In chunks: an error here (Lua's unpack limit) would strand every job of the batch.
call_in_chunks('ZADD', processing_key, leased)
call_in_chunks('HDEL', queued_key, taken_ids)
if duplicates > 0 then redis.call('HINCRBY', stats_key, 'duplicate', duplicates) end
if deferred > 0 then redis.call('HINCRBY', stats_key, 'lock_deferred', deferred) end
-- When the next scheduled job is due, so that a worker that got fewer jobs than it asked for
-- (the ready list ran out, or what it popped was deferred or settled) waits for that instead of
-- a full idle period.
local next_due = -1
local head = redis.call('ZRANGE', retry_key, 0, 0, 'WITHSCORES')
if head[2] then next_due = tonumber(head[2]) end
-- Remembered for a lease (when they have all expired, a replay would answer nothing), so a
-- claim sent again after a lost reply gets these leases instead of stranding them.
if claim_key and claim_id and #result > 0 then
  local record = {claim_id, decimal(now)}
  for i = 1, #result, 10 do
    record[#record + 1] = result[i]                  -- id
    record[#record + 1] = decimal(result[i + 5])     -- lease
  end
  redis.call('SET', claim_key, table.concat(record, '|'), 'PX', lease_ms)
end
local reply = {1, duplicates, next_due, now}
for _, value in ipairs(dups) do reply[#reply + 1] = value end
for _, value in ipairs(result) do reply[#reply + 1] = value end
return reply
