-- enqueue: add one or many jobs, honouring idempotency keys and existing ids.
-- KEYS[1] -> <prefix>:{Q}:queue       (List, ready ids)
-- KEYS[2] -> <prefix>:{Q}:retry       (ZSET, delayed ids by due ms)
-- KEYS[3] -> <prefix>:{Q}:stats       (Hash, counters)
-- KEYS[4..] -> per job: <prefix>:{Q}:job:<id>, then <prefix>:{Q}:idem:<key> when the job has one
-- ARGV[1] -> number of jobs
-- ARGV[2] -> unused (was the idempotency TTL: a key now lives as long as its job)
-- ARGV[3..] -> per job, 8 values: id, type, payload (JSON text), max_attempts, delay_ms,
--              idempotency_key ('' = none), resource_key ('' = none), headers (JSON text or '')
-- Returns: flat array of pairs {job_id, created} per job; created is 0 when the job already
--          existed: a live or completed idempotency key returned its job, or a job with that
--          id exists (it is returned untouched).
-- Errors: ANTRE_INVALID (a job's id, max_attempts, delay_ms or type is unusable, or one of its
--         keys has the wrong Redis type); ANTRE_IDEMPOTENCY_CONFLICT (an idempotency key already
--         names a job of another type or payload). Either way nothing is written.
local ready_key, retry_key, stats_key = KEYS[1], KEYS[2], KEYS[3]
local count = tonumber(ARGV[1])
local now = now_ms()
local result = {}

-- A key dedupes the same request (type and payload) only: reused for a different one, it is
-- an error, not a read of the other job (as payment APIs answer 409).
local function digest_of(job_type, payload)
  return string.sub(redis.sha1hex(job_type .. '\n' .. payload), 1, 16)
end

-- The job an idempotency marker names, if that job still protects the key: a completed key
-- protects even after its record expired; a live marker whose record is gone protects nothing.
local function marked_job(marker, job_prefix)
  local id, digest, done = parse_marker(marker)
  if done or redis.call('EXISTS', job_prefix .. id) == 1 then return id, digest end
  return nil, nil
end

local function invalid(j, message)
  return redis.error_reply('ANTRE_INVALID job ' .. j .. ': ' .. message)
end

-- Validate every job before writing any: producers in other languages call this script too.
local key_index = 4
local batch_digests = {}
local plan = {}
for j = 1, count do
  local base = 3 + (j - 1) * 8
  local id, job_type, payload = ARGV[base], ARGV[base + 1], ARGV[base + 2]
  local max_attempts, delay_ms = ARGV[base + 3], tonumber(ARGV[base + 4])
  local idem = ARGV[base + 5]
  local job_key = KEYS[key_index]
  local idem_key = nil
  key_index = key_index + 1
  if idem ~= '' then
    idem_key = KEYS[key_index]
    key_index = key_index + 1
  end
  if not id or #id < 1 or #id > 128 or string.find(id, '[:|%s%c]') then
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
    return invalid(j, 'delay_ms got ' .. tostring(ARGV[base + 4]) .. '; must be a number >= 0')
  end
  if job_type == '' then
    return invalid(j, 'type must not be empty')
  end
  -- One read answers both: does the id name a job already, and is its key a hash at all.
  local known = redis.pcall('HEXISTS', job_key, 'id')
  if type(known) == 'table' then
    -- A finished or dead record is packed (a String); any other type is not antre's.
    if not record_table(job_key, id) then
      return invalid(j, 'job key of id ' .. id .. ' holds the wrong Redis type')
    end
    known = 1
  end
  local step = {job_key = job_key, idem_key = idem_key, known = known == 1}
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

local arg_index, created_total = 3, 0
local created_ids = {}
for j = 1, count do
  local id, job_type, payload = ARGV[arg_index], ARGV[arg_index + 1], ARGV[arg_index + 2]
  local max_attempts, delay_ms = ARGV[arg_index + 3], math.floor(tonumber(ARGV[arg_index + 4]))
  local idem, resource, headers = ARGV[arg_index + 5], ARGV[arg_index + 6], ARGV[arg_index + 7]
  arg_index = arg_index + 8
  local job_key, idem_key = plan[j].job_key, plan[j].idem_key

  local existing = nil
  if idem_key then
    local marker = redis.call('GET', idem_key)
    if marker then existing = marked_job(marker, string.sub(job_key, 1, #job_key - #id)) end
  end
  -- An id names one job: a producer that chose an id already in use gets that job back.
  if not existing and (plan[j].known or created_ids[id]) then existing = id end

  if existing then
    result[#result + 1] = existing
    result[#result + 1] = 0
  else
    local status, entry_event = 'queued', 'enqueued'
    if delay_ms > 0 then status = 'scheduled' end
    -- updated_at and queued_at are left out while they equal created_at (readers fall back to
    -- it): two fewer values keep a queued record smaller.
    local fields = {
      'id', id, 'type', job_type, 'payload', payload, 'status', status,
      'attempt', 0, 'max_attempts', max_attempts, 'lease', 0, 'created_at', now,
      'schema_version', 1,
    }
    if delay_ms > 0 then
      fields[#fields + 1] = 'queued_at'; fields[#fields + 1] = now + delay_ms
    end
    if idem ~= '' then
      fields[#fields + 1] = 'idempotency_key'; fields[#fields + 1] = idem
      fields[#fields + 1] = 'idempotency_digest'; fields[#fields + 1] = plan[j].digest
    end
    if resource ~= '' then fields[#fields + 1] = 'resource_key'; fields[#fields + 1] = resource end
    if headers ~= '' then fields[#fields + 1] = 'headers'; fields[#fields + 1] = headers end
    local n, hfield, hvalue = history_entry(0, entry_event, now, 0, nil, nil)
    fields[#fields + 1] = 'events'; fields[#fields + 1] = n
    fields[#fields + 1] = hfield; fields[#fields + 1] = hvalue
    redis.call('HSET', job_key, unpack(fields))
    if idem_key then
      -- No expiry while the job is live; ack gives the completed key its own TTL, and cancel,
      -- purge and the dead-letter retention delete it with the job.
      redis.call('SET', idem_key, marker_text(id, plan[j].digest, false))
    end
    if delay_ms > 0 then
      redis.call('ZADD', retry_key, now + delay_ms, id)
    else
      redis.call('LPUSH', ready_key, id)
    end
    created_total = created_total + 1
    created_ids[id] = true
    result[#result + 1] = id
    result[#result + 1] = 1
  end
end

if created_total > 0 then
  redis.call('HINCRBY', stats_key, 'enqueued', created_total)
end
return result
