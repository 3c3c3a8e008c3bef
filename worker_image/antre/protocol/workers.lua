-- workers: the live worker registry entries of a queue. Read only.
-- KEYS[1] -> <prefix>:{Q}:workers        (ZSET, worker id -> last beat ms)
-- KEYS[2] -> <prefix>:{Q}:field_readers  (ZSET, the workers of KEYS[1] that claim queued fields)
-- KEYS[3] -> <prefix>:{Q}:queued         (Hash, the jobs queued as fields)
-- KEYS[4] -> <prefix>:{Q}:earlier_workers (String: while it exists enqueue writes no field)
-- Undeclared keys under the same {Q} tag: <prefix>:{Q}:worker:<wid> entries.
-- ARGV[1] -> worker key prefix
-- Returns: {now_ms, jobs queued as fields (0 when KEYS[3] is not a Hash), the PTTL of KEYS[4]
--          (-2: absent), then per live worker:
--          worker id, last beat ms, entry JSON, 1 if it claims queued fields (this version on)
--          else 0 (an earlier version)}; workers whose entry expired are skipped.
-- Errors: none of its own.
local workers_key, readers_key, queued_key, earlier_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local worker_prefix = ARGV[1]
local queued = redis.pcall('HLEN', queued_key)
if type(queued) ~= 'number' then queued = 0 end
local result = {now_ms(), queued, redis.call('PTTL', earlier_key)}
local members = redis.call('ZRANGE', workers_key, 0, -1, 'WITHSCORES')
local ids = {}
for i = 1, #members, 2 do ids[#ids + 1] = members[i] end
local reading = zmscore_all(readers_key, ids)
for i = 1, #members, 2 do
  local entry = redis.pcall('GET', worker_prefix .. members[i])
  if type(entry) == 'string' then
    result[#result + 1] = members[i]
    result[#result + 1] = members[i + 1]
    result[#result + 1] = entry
    result[#result + 1] = reading[(i + 1) / 2] and 1 or 0
  end
end
return result
