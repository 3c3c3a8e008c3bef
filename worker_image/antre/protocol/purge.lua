-- purge: delete dead jobs for good (their records and idempotency keys).
-- KEYS[1] -> <prefix>:{Q}:dead   (List)
-- KEYS[2] -> <prefix>:{Q}:stats  (Hash)
-- Undeclared keys under the same {Q} tag: job hashes and idempotency keys.
-- ARGV[1] -> job key prefix, ARGV[2] -> idempotency key prefix
-- ARGV[3] -> limit: with no ids, purge up to this many of the oldest dead jobs
-- ARGV[4..] -> job ids to purge (none = the oldest `limit`)
-- Returns: the number of jobs purged.
-- Errors: none of its own.
local dead_key, stats_key = KEYS[1], KEYS[2]
local job_prefix, idem_prefix, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local ids = take_dead(dead_key, 4, limit)
for _, id in ipairs(ids) do
  local job_key = job_prefix .. id
  local idem = redis.call('HGET', job_key, 'idempotency_key')
  if idem then
    local marker = redis.call('GET', idem_prefix .. idem)
    if marker and string.match(marker, '^([^|]+)') == id then
      redis.call('DEL', idem_prefix .. idem)
    end
  end
  redis.call('DEL', job_key)
end
if #ids > 0 then redis.call('HINCRBY', stats_key, 'purged', #ids) end
return #ids
