-- purge: delete dead jobs for good (their records and idempotency keys).
-- KEYS[1] -> <prefix>:{Q}:dead_letters  (ZSET, id -> when it died, microseconds)
-- KEYS[2] -> <prefix>:{Q}:stats         (Hash)
-- Undeclared keys under the same {Q} tag: job hashes and idempotency keys.
-- ARGV[1] -> job key prefix, ARGV[2] -> idempotency key prefix
-- ARGV[3] -> limit: with no ids, purge up to this many of the oldest dead jobs
-- ARGV[4..] -> job ids to purge (none = the oldest `limit`; at most 1000)
-- Returns: the number of jobs purged (ids not among the dead letters are skipped).
-- Errors: ANTRE_INVALID (more than 1000 ids).
local dead_key, stats_key = KEYS[1], KEYS[2]
local job_prefix, idem_prefix, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local refused = too_many_ids(4)
if refused then return refused end
local ids = take_dead(dead_key, 4, limit)
for _, id in ipairs(ids) do
  local job_key = job_prefix .. id
  drop_idempotency_key(idem_prefix, read_fields(job_key, 'idempotency_key')[1], id)
  redis.call('DEL', job_key)
end
if #ids > 0 then redis.call('HINCRBY', stats_key, 'purged', #ids) end
return #ids
