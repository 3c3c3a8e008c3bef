-- enqueue: add one or many jobs, honouring idempotency keys.
-- KEYS[1] -> <prefix>:{Q}:queue       (List, ready ids)
-- KEYS[2] -> <prefix>:{Q}:retry       (ZSET, delayed ids by due ms)
-- KEYS[3] -> <prefix>:{Q}:stats       (Hash, counters)
-- KEYS[4..] -> per job: <prefix>:{Q}:job:<id>, then <prefix>:{Q}:idem:<key> when the job has one
-- ARGV[1] -> number of jobs
-- ARGV[2] -> idempotency TTL in ms (how long a key dedupes after enqueue)
-- ARGV[3..] -> per job, 8 values: id, type, payload (JSON text), max_attempts, delay_ms,
--              idempotency_key ('' = none), resource_key ('' = none), headers (JSON text or '')
-- Returns: flat array of pairs {job_id, created} per job; created is 0 when a live
--          idempotency key returned the existing job id instead.
-- Errors: ANTRE_INVALID (a job's max_attempts, delay_ms or type is unusable; nothing written).
local ready_key, retry_key, stats_key = KEYS[1], KEYS[2], KEYS[3]
local count = tonumber(ARGV[1])
local idem_ttl_ms = tonumber(ARGV[2])
local now = now_ms()
local result = {}

-- Validate every job before writing any: producers in other languages call this script too.
for j = 0, count - 1 do
  local base = 3 + j * 8
  local max_attempts, delay_ms = tonumber(ARGV[base + 3]), tonumber(ARGV[base + 4])
  if not max_attempts or max_attempts < 1 or max_attempts % 1 ~= 0 then
    return redis.error_reply('ANTRE_INVALID job ' .. (j + 1) .. ': max_attempts got '
      .. tostring(ARGV[base + 3]) .. '; must be an integer >= 1')
  end
  if not delay_ms or delay_ms < 0 or delay_ms ~= delay_ms or delay_ms == math.huge then
    return redis.error_reply('ANTRE_INVALID job ' .. (j + 1) .. ': delay_ms got '
      .. tostring(ARGV[base + 4]) .. '; must be a number >= 0')
  end
  if ARGV[base + 1] == '' then
    return redis.error_reply('ANTRE_INVALID job ' .. (j + 1) .. ': type must not be empty')
  end
end
local key_index, arg_index, created_total = 4, 3, 0

for _ = 1, count do
  local id, job_type, payload = ARGV[arg_index], ARGV[arg_index + 1], ARGV[arg_index + 2]
  local max_attempts, delay_ms = ARGV[arg_index + 3], tonumber(ARGV[arg_index + 4])
  local idem, resource, headers = ARGV[arg_index + 5], ARGV[arg_index + 6], ARGV[arg_index + 7]
  arg_index = arg_index + 8
  local job_key = KEYS[key_index]
  local idem_key = nil
  key_index = key_index + 1
  if idem ~= '' then
    idem_key = KEYS[key_index]
    key_index = key_index + 1
  end

  local existing = nil
  if idem_key then
    local marker = redis.call('GET', idem_key)
    if marker then
      existing = string.match(marker, '^([^|]+)')
      -- A completed key protects even after the job's record expired; a live marker whose
      -- record is gone (evicted) protects nothing.
      if string.sub(marker, -5) ~= '|done' then
        local job_prefix = string.sub(job_key, 1, #job_key - #id)
        if redis.call('EXISTS', job_prefix .. existing) == 0 then
          existing = nil
        end
      end
    end
  end

  if existing then
    result[#result + 1] = existing
    result[#result + 1] = 0
  else
    local status, entry_event = 'queued', 'enqueued'
    if delay_ms > 0 then status = 'scheduled' end
    local fields = {
      'id', id, 'type', job_type, 'payload', payload, 'status', status,
      'attempt', 0, 'max_attempts', max_attempts, 'lease', 0,
      'created_at', now, 'updated_at', now, 'queued_at', now + delay_ms,
      'schema_version', 1,
    }
    if idem ~= '' then fields[#fields + 1] = 'idempotency_key'; fields[#fields + 1] = idem end
    if resource ~= '' then fields[#fields + 1] = 'resource_key'; fields[#fields + 1] = resource end
    if headers ~= '' then fields[#fields + 1] = 'headers'; fields[#fields + 1] = headers end
    local n, hfield, hvalue = history_entry(0, entry_event, now, 0, nil, nil)
    fields[#fields + 1] = 'events'; fields[#fields + 1] = n
    fields[#fields + 1] = hfield; fields[#fields + 1] = hvalue
    redis.call('HSET', job_key, unpack(fields))
    if idem_key then
      redis.call('SET', idem_key, id, 'PX', idem_ttl_ms)
    end
    if delay_ms > 0 then
      redis.call('ZADD', retry_key, now + delay_ms, id)
    else
      redis.call('LPUSH', ready_key, id)
    end
    created_total = created_total + 1
    result[#result + 1] = id
    result[#result + 1] = 1
  end
end

if created_total > 0 then
  redis.call('HINCRBY', stats_key, 'enqueued', created_total)
end
return result
