-- expand_queued: turn queued fields back into job Hashes, the form workers of every version
-- claim, before workers are rolled back to a version that reads only Hashes ("Versions").
-- KEYS[1] -> <prefix>:{Q}:queued        (Hash, id -> a job enqueued and not claimed yet)
-- KEYS[2] -> <prefix>:{Q}:retry         (ZSET; a delayed job's id waits here, else in the list)
-- KEYS[3] -> <prefix>:{Q}:field_readers (ZSET, the registered workers that claim queued fields)
-- Undeclared keys under the same {Q} tag: the job keys <prefix>:{Q}:job:<id>.
-- ARGV[1] -> job key prefix
-- ARGV[2] -> jobs to expand in this call, at most (MAX_JOBS_PER_CALL)
-- Writes: per field taken, the job's Hash as enqueue writes it when no worker of this version
--         is registered (status 'scheduled' while its id is in the retry set, else 'queued'),
--         and the field deleted, in one step; the id stays where it waits. A field whose id
--         already has a job key (never both, unless edited by hand) is left as it is.
-- Returns: {expanded, fields left, left because their job key exists, field readers registered}
-- Errors: ANTRE_INVALID when KEYS[1] is not a Hash.
local queued_key, retry_key, readers_key = KEYS[1], KEYS[2], KEYS[3]
local job_prefix, limit = ARGV[1], tonumber(ARGV[2])

-- HRANDFIELD with a positive count: distinct fields, so each call takes new ones; the fields it
-- expands are deleted, and one left in place is counted, not taken again in this call.
local picked = redis.pcall('HRANDFIELD', queued_key, limit, 'WITHVALUES')
if picked.err then
  return redis.error_reply('ANTRE_INVALID KEYS[1] ' .. queued_key .. ' holds the wrong Redis type')
end
local expanded, clashing = 0, 0
for i = 1, #picked, 2 do
  local id, text = picked[i], picked[i + 1]
  local job_key = job_prefix .. id
  if redis.call('EXISTS', job_key) == 1 then
    clashing = clashing + 1
  else
    local record = queued_record(text, id)
    if redis.call('ZSCORE', retry_key, id) then record.status = 'scheduled' end
    redis.call('HSET', job_key, unpack(flat_fields(record)))
    redis.call('HDEL', queued_key, id)
    expanded = expanded + 1
  end
end
return {expanded, redis.call('HLEN', queued_key), clashing, redis.call('ZCARD', readers_key)}
