-- purge: delete dead jobs for good (their records and idempotency keys).
-- KEYS[1] -> <prefix>:{Q}:dead_letters  (ZSET, id -> when it died, microseconds)
-- KEYS[2] -> <prefix>:{Q}:stats         (Hash)
-- Undeclared keys under the same {Q} tag: job hashes and idempotency keys.
-- ARGV[1] -> job key prefix, ARGV[2] -> idempotency key prefix
-- ARGV[3] -> limit: with no ids, purge up to this many of the oldest dead letters
-- ARGV[4] -> cutoff: with no ids, take only letters scored at or below it; '' = the newest
--            score now, which the reply returns for the purge's later calls to pass
-- ARGV[5..] -> job ids to purge (none = the oldest `limit`; at most 1000)
-- Returns: {purged, cutoff}: how many ids this call took off the dead letters and deleted
-- (given ids that are not among them are skipped, in O(log N) each; a letter whose record is
-- gone counts as purged), and the cutoff it used ('' with ids, or when there were no dead
-- letters).
-- Errors: ANTRE_INVALID (more than 1000 ids).
local dead_key, stats_key = KEYS[1], KEYS[2]
local job_prefix, idem_prefix, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local refused = too_many_ids(5)
if refused then return refused end
local ids, cutoff = take_dead(dead_key, 5, limit, ARGV[4])
for _, id in ipairs(ids) do
  local job_key = job_prefix .. id
  drop_idempotency_key(idem_prefix, read_fields(job_key, 'idempotency_key')[1], id)
  redis.call('DEL', job_key)
end
if #ids > 0 then redis.call('HINCRBY', stats_key, 'purged', #ids) end
return {#ids, cutoff}
