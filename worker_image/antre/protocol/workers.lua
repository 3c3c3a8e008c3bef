-- workers: the live worker registry entries of a queue. Read only.
-- KEYS[1] -> <prefix>:{Q}:workers   (ZSET, worker id -> last beat ms)
-- Undeclared keys under the same {Q} tag: <prefix>:{Q}:worker:<wid> entries.
-- ARGV[1] -> worker key prefix
-- Returns: {now_ms, then per live worker: worker id, last beat ms, entry JSON};
--          workers whose entry expired are skipped.
-- Errors: none of its own.
local workers_key, worker_prefix = KEYS[1], ARGV[1]
local result = {now_ms()}
local members = redis.call('ZRANGE', workers_key, 0, -1, 'WITHSCORES')
for i = 1, #members, 2 do
  local entry = redis.pcall('GET', worker_prefix .. members[i])
  if type(entry) == 'string' then
    result[#result + 1] = members[i]
    result[#result + 1] = members[i + 1]
    result[#result + 1] = entry
  end
end
return result
