-- expand_queued: turn queued fields back into job Hashes, the form workers of every version
-- claim, before workers are rolled back to a version that reads only Hashes ("Versions").
-- KEYS[1] -> <prefix>:{Q}:queued        (Hash, id -> a job enqueued and not claimed yet)
-- KEYS[2] -> <prefix>:{Q}:retry         (ZSET; a delayed job's id waits here, else in the list)
-- KEYS[3] -> <prefix>:{Q}:workers       (ZSET, registered workers)
-- KEYS[4] -> <prefix>:{Q}:field_readers (ZSET, the registered workers that claim queued fields)
-- KEYS[5] -> <prefix>:{Q}:queue         (List, ready ids; pushed to only with ARGV[4] = 1)
-- Undeclared keys under the same {Q} tag: the job keys <prefix>:{Q}:job:<id>.
-- ARGV[1] -> job key prefix
-- ARGV[2] -> HSCAN cursor ('0' to start)
-- ARGV[3] -> HSCAN COUNT (fields per call, about; MAX_JOBS_PER_CALL)
-- ARGV[4] -> 1: also push each expanded job that is not delayed to the head of the ready list
--            (recovery: an earlier worker popped and dropped ids of jobs it found only as
--            fields; an id in the list twice is claimed once, the claim drops the other)
-- Writes: nothing while a worker of this version is registered (enqueues would go on writing
--         fields). Else, per field scanned, the job's Hash as enqueue writes it for earlier
--         workers (status 'scheduled' while its id is in the retry set, else 'queued') and the
--         field deleted, in one step; the id stays where it waits. A field whose id already
--         has a job key (never both, unless edited by hand) is left as it is.
-- Returns: {next cursor ('0': the scan is done), expanded, fields left, workers of this version
--          registered, then the ids of the fields left because their job key exists}
-- Errors: ANTRE_INVALID when KEYS[1] is not a Hash.
local queued_key, retry_key, workers_key, readers_key, ready_key = KEYS[1], KEYS[2], KEYS[3],
  KEYS[4], KEYS[5]
local job_prefix, cursor, count, requeue = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1'

local left = redis.pcall('HLEN', queued_key)
if type(left) ~= 'number' then
  return redis.error_reply('ANTRE_INVALID KEYS[1] ' .. queued_key .. ' holds the wrong Redis type')
end
local readers = #redis.call('ZINTER', 2, workers_key, readers_key)
if readers > 0 then return {'0', 0, left, readers} end

local scanned = redis.call('HSCAN', queued_key, cursor, 'COUNT', count)
local fields, expanded, clashing = scanned[2], 0, {}
for i = 1, #fields, 2 do
  local id, text = fields[i], fields[i + 1]
  local job_key = job_prefix .. id
  if redis.call('EXISTS', job_key) == 1 then
    clashing[#clashing + 1] = id
  else
    local record = queued_record(text, id)
    local delayed = redis.call('ZSCORE', retry_key, id)
    if delayed then record.status = 'scheduled' end
    redis.call('HSET', job_key, unpack(flat_fields(record)))
    redis.call('HDEL', queued_key, id)
    if requeue and not delayed then redis.call('RPUSH', ready_key, id) end
    expanded = expanded + 1
  end
end
local reply = {scanned[1], expanded, redis.call('HLEN', queued_key), 0}
for _, id in ipairs(clashing) do reply[#reply + 1] = id end
return reply
