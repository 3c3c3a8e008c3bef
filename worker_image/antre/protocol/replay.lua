-- replay: move dead jobs back to the ready queue with a fresh attempt budget.
-- KEYS[1] -> <prefix>:{Q}:queue         (List)
-- KEYS[2] -> <prefix>:{Q}:dead_letters  (ZSET, id -> when it died, microseconds)
-- KEYS[3] -> <prefix>:{Q}:stats         (Hash)
-- Undeclared keys under the same {Q} tag: job records (packed while dead; a Hash again once
-- replayed).
-- ARGV[1] -> job key prefix
-- ARGV[2] -> limit: with no ids, take up to this many of the oldest dead letters
-- ARGV[3] -> cutoff: with no ids, take only letters scored at or below it; '' = the newest
--            score now, which the reply returns for the replay's later calls to pass
-- ARGV[4..] -> job ids to replay (none = the oldest `limit`; at most 1000)
-- Returns: {taken, cutoff, replayed ids...}: how many ids this call took off the dead
-- letters (given ids that are not among them are skipped, in O(log N) each), the cutoff it
-- used ('' with ids, or when there were no dead letters), then the ids replayed. An id taken
-- whose record is gone or not dead is dropped, not replayed.
-- Errors: ANTRE_INVALID (more than 1000 ids).
local ready_key, dead_key, stats_key = KEYS[1], KEYS[2], KEYS[3]
local job_prefix, limit = ARGV[1], tonumber(ARGV[2])
local refused = too_many_ids(4)
if refused then return refused end
local now = now_ms()
local ids, cutoff = take_dead(dead_key, 4, limit, ARGV[3])
local replayed = {}

-- What a replay changes in a dead record, as field/value pairs (expired_lease goes too).
local function replay_changes(events)
  local n, hfield, hvalue = history_entry(events, 'replayed', now, 0, nil, nil)
  return {'status', 'queued', 'attempt', 0, 'lock_deferrals', 0, 'releases', 0,
    'updated_at', now, 'queued_at', now, 'events', n, hfield, hvalue}
end

for _, id in ipairs(ids) do
  local job_key = job_prefix .. id
  local kind = redis.call('TYPE', job_key)['ok']
  local dead = false
  if kind == 'string' then
    -- A packed dead record, as this version writes them: read and unpacked once, then written
    -- back as a live record's Hash with the replay's changes in the same HSET.
    local r = unpack_record(redis.call('GET', job_key), id)
    if r and r.status == 'dead' then
      local changes = replay_changes(r.events)
      for i = 1, #changes, 2 do r[changes[i]] = changes[i + 1] end
      r.expired_lease = nil
      redis.call('DEL', job_key)
      call_in_chunks('HSET', job_key, flat_fields(r))
      dead = true
    end
  elseif kind == 'hash' then  -- a dead record an earlier version left as a Hash
    local f = redis.call('HMGET', job_key, 'status', 'events')
    if f[1] == 'dead' then
      redis.call('HSET', job_key, unpack(replay_changes(f[2])))
      redis.call('HDEL', job_key, 'expired_lease')
      dead = true
    end
  end
  if dead then
    redis.call('LPUSH', ready_key, id)
    replayed[#replayed + 1] = id
  end
end
if #replayed > 0 then redis.call('HINCRBY', stats_key, 'replayed', #replayed) end
return {#ids, cutoff, unpack(replayed)}
