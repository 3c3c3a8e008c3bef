-- enqueue: add one or many jobs, honouring idempotency keys and existing ids.
-- KEYS[1] -> <prefix>:{Q}:queue       (List, ready ids)
-- KEYS[2] -> <prefix>:{Q}:retry       (ZSET, delayed ids by due ms)
-- KEYS[3] -> <prefix>:{Q}:stats       (Hash, counters)
-- KEYS[4] -> <prefix>:{Q}:queued      (Hash, id -> the packed record of a job not claimed yet)
-- KEYS[5] -> <prefix>:{Q}:workers     (ZSET, registered workers)
-- KEYS[6] -> <prefix>:{Q}:field_readers (ZSET, the registered workers that claim queued fields)
-- KEYS[7] -> <prefix>:{Q}:earlier_workers (String, set while and for an hour after a worker of an
--            earlier version was seen registered)
-- KEYS[8..] -> per job: <prefix>:{Q}:job:<id>, then <prefix>:{Q}:idem:<key> when the job has one
--              (read; written only for a job kept as its own Hash, below)
-- ARGV[1] -> number of jobs
-- ARGV[2] -> unused (was the idempotency TTL: a key now lives as long as its job)
-- ARGV[3..] -> per job, 8 values: id, type, payload (JSON text), max_attempts, delay_ms,
--              idempotency_key ('' = none), resource_key ('' = none), headers (JSON text or '')
-- Writes: per new job a field of the queued Hash (see queued_value in _prelude.lua) and its id
--         pushed on the ready list, or for a delay its due time in the retry set. While a
--         registered worker is not in KEYS[6] (a worker of an earlier version, which drops an
--         id it finds only as a field), KEYS[7] exists (one was, within the hour), or no worker
--         is registered, the job is written as its own Hash instead, the form every version
--         claims (PROTOCOL.md "Versions"); seeing an earlier worker (re)sets KEYS[7].
-- Returns: flat array of pairs {job_id, created} per job; created is 0 when the job already
--          existed: a live or completed idempotency key returned its job, or a job with that
--          id exists, as a key or a queued field (it is returned untouched).
-- Errors: ANTRE_INVALID (a job's id, max_attempts, delay_ms or type is unusable, or one of its
--         keys has the wrong Redis type); ANTRE_IDEMPOTENCY_CONFLICT (an idempotency key already
--         names a job of another type or payload). Either way nothing is written.
local ready_key, retry_key, stats_key, queued_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local count = tonumber(ARGV[1])
local now_text = now_ms_text()
local result = {}
-- By membership, not by size: a reaper of an earlier version prunes KEYS[5] only, so KEYS[6] may
-- keep the entries of workers of this version that are gone, as many as the earlier ones.
local earlier_key = KEYS[7]
local registered = redis.call('EXISTS', KEYS[5]) == 1
local earlier_seen = registered and earlier_workers_registered(KEYS[5], KEYS[6])
local as_fields = registered and not earlier_seen and redis.call('EXISTS', earlier_key) == 0

-- A key dedupes the same request (type and payload) only: reused for a different one, it is
-- an error, not a read of the other job (as payment APIs answer 409).
local function digest_of(job_type, payload)
  return string.sub(redis.sha1hex(job_type .. '\n' .. payload), 1, 16)
end

-- The job an idempotency marker names, if that job still protects the key: a completed key
-- protects even after its record expired; a live marker whose record is gone protects nothing.
local function marked_job(marker, job_prefix)
  local id, digest, done = parse_marker(marker)
  if done or redis.pcall('HEXISTS', queued_key, id) == 1
      or redis.call('EXISTS', job_prefix .. id) == 1 then
    return id, digest
  end
  return nil, nil
end

local function invalid(j, message)
  return redis.error_reply('ANTRE_INVALID job ' .. j .. ': ' .. message)
end

-- Validate every job before writing any: producers in other languages call this script too.
-- (The queued key's type is checked by the first write, below.)
local key_index = 8
local batch_digests = {}
local plan = {}
for j = 1, count do
  local base = 3 + (j - 1) * 8
  local id, job_type, payload = ARGV[base], ARGV[base + 1], ARGV[base + 2]
  -- '0' (no delay) is most jobs' value: no strtod for it.
  local max_attempts, delay_text = ARGV[base + 3], ARGV[base + 4]
  local delay_ms = delay_text == '0' and 0 or tonumber(delay_text)
  local idem = ARGV[base + 5]
  local job_key = KEYS[key_index]
  local idem_key = nil
  key_index = key_index + 1
  if idem ~= '' then
    idem_key = KEYS[key_index]
    key_index = key_index + 1
  end
  -- Anchored, the pattern walks the id once; unanchored, find starts over at each byte.
  if not id or #id > 128 or not string.find(id, '^[^:|%s%c]+$') then
    return invalid(j, 'id got ' .. tostring(id) .. '; must be 1-128 characters without '
      .. "':', '|', spaces or control characters")
  end
  if not job_key or string.sub(job_key, -(#id + 5)) ~= ':job:' .. id then
    return invalid(j, 'KEYS must hold its job key <prefix>:{Q}:job:' .. id)
  end
  if not string.match(max_attempts or '', '^[1-9]%d*$') then
    return invalid(j, 'max_attempts got ' .. tostring(max_attempts)
      .. '; must be an integer >= 1 (digits only)')
  end
  if not delay_ms or delay_ms < 0 or delay_ms ~= delay_ms or delay_ms == math.huge then
    return invalid(j, 'delay_ms got ' .. tostring(delay_text) .. '; must be a number >= 0')
  end
  delay_ms = math.floor(delay_ms)
  if job_type == '' then
    return invalid(j, 'type must not be empty')
  end
  -- Does the id name a job by its key (a live, finished or dead record, or the stub an ack
  -- keeps), and is that key a record at all. EXISTS first: a new id's key is missing, and TYPE's
  -- status reply costs Redis a table. A queued field is found by the write itself (HSETNX).
  local kind = redis.call('EXISTS', job_key) == 1 and redis.call('TYPE', job_key)['ok'] or 'none'
  if kind ~= 'none' and kind ~= 'hash'
      and not (kind == 'string' and packed_array(redis.call('GET', job_key))) then
    return invalid(j, 'job key of id ' .. id .. ' holds the wrong Redis type')
  end
  local step = {job_key = job_key, idem_key = idem_key, known = kind ~= 'none', delay_ms = delay_ms}
  if idem_key then
    local digest = digest_of(job_type, payload)
    local marker = redis.pcall('GET', idem_key)
    if type(marker) == 'table' then
      return invalid(j, 'idempotency key ' .. idem .. ' holds the wrong Redis type')
    end
    local job_prefix = string.sub(job_key, 1, #job_key - #id)
    local existing, existing_digest = nil, nil
    if marker then existing, existing_digest = marked_job(marker, job_prefix) end
    if not existing and batch_digests[idem] then
      existing, existing_digest = batch_digests[idem][1], batch_digests[idem][2]
    end
    if existing and existing_digest ~= '' and existing_digest ~= digest then
      return redis.error_reply('ANTRE_IDEMPOTENCY_CONFLICT job ' .. j .. ': idempotency key '
        .. idem .. ' was used for job ' .. existing .. ' with another type or payload')
    end
    if not batch_digests[idem] then batch_digests[idem] = {existing or id, existing_digest or digest} end
    step.digest = digest
  end
  plan[j] = step
end

local hashes_written = {}
local arg_index, created_total = 3, 0
for j = 1, count do
  local id, job_type, payload = ARGV[arg_index], ARGV[arg_index + 1], ARGV[arg_index + 2]
  local max_attempts, delay_ms = ARGV[arg_index + 3], plan[j].delay_ms
  local idem, resource, headers = ARGV[arg_index + 5], ARGV[arg_index + 6], ARGV[arg_index + 7]
  arg_index = arg_index + 8
  local job_key, idem_key = plan[j].job_key, plan[j].idem_key

  local existing = nil
  if idem_key then
    local marker = redis.call('GET', idem_key)
    if marker then existing = marked_job(marker, string.sub(job_key, 1, #job_key - #id)) end
  end
  -- An id names one job: a producer that chose an id already in use gets that job back.
  if not existing and plan[j].known then existing = id end

  local created = false
  if not existing then
    -- Fields the array does not hold, under their packed names; created_at is the array's.
    local extras = nil
    if delay_ms > 0 or idem ~= '' or resource ~= '' or headers ~= '' then
      extras = {}
      if delay_ms > 0 then extras.q = tonumber(now_text) + delay_ms end
      if idem ~= '' then extras.i, extras.d = idem, plan[j].digest end
      if resource ~= '' then extras.r = resource end
      if headers ~= '' then extras.H = headers end
    end
    -- HSETNX: an id already queued (earlier in this batch, or by another call) keeps its job.
    -- It is the batch's first write, so a queued key of the wrong type (a hand edit) is refused
    -- here with nothing written (pcall); once it succeeded, the key is a Hash.
    local value = queued_value(job_type, payload, now_text, max_attempts, extras)
    local written
    if as_fields then
      written = redis.pcall('HSETNX', queued_key, id, value)
    else
      -- The job's own Hash, unless its id is queued as a field or was written earlier in this
      -- batch (a key that existed before the batch is plan[j].known, above).
      local queued = redis.pcall('HEXISTS', queued_key, id)
      written = queued  -- an error (the wrong type) is answered below, as for HSETNX
      if type(queued) ~= 'table' then
        written = 0
        if queued == 0 and not hashes_written[id] then
          local record = queued_record(value, id)
          if delay_ms > 0 then record.status = 'scheduled' end
          redis.call('HSET', job_key, unpack(flat_fields(record)))
          hashes_written[id] = true
          written = 1
        end
      end
    end
    if type(written) == 'table' then
      if string.find(written.err or '', 'WRONGTYPE', 1, true) then
        return redis.error_reply('ANTRE_INVALID KEYS[4] ' .. queued_key
          .. ' holds the wrong Redis type')
      end
      return written  -- any other error as Redis gave it (at maxmemory: OOM, the backpressure)
    end
    created = written == 1
    if not created then existing = id end
  end

  if created then
    if idem_key then
      -- No expiry while the job is live; ack gives the completed key its own TTL, and cancel,
      -- purge and the dead-letter retention delete it with the job.
      redis.call('SET', idem_key, marker_text(id, plan[j].digest, false))
    end
    if delay_ms > 0 then
      redis.call('ZADD', retry_key, tonumber(now_text) + delay_ms, id)
    else
      redis.call('LPUSH', ready_key, id)
    end
    created_total = created_total + 1
    result[#result + 1] = id
    result[#result + 1] = 1
  else
    result[#result + 1] = existing
    result[#result + 1] = 0
  end
end

if created_total > 0 then
  redis.call('HINCRBY', stats_key, 'enqueued', created_total == 1 and '1' or created_total)
  if earlier_seen then redis.call('SET', earlier_key, now_text, 'PX', EARLIER_WORKER_WINDOW_MS) end
end
return result
