-- depth: everything an autoscaler or a dashboard needs about a queue, in one round trip.
-- Read only.
-- KEYS[1] -> <prefix>:{Q}:queue       (List)
-- KEYS[2] -> <prefix>:{Q}:processing  (ZSET)
-- KEYS[3] -> <prefix>:{Q}:retry       (ZSET)
-- KEYS[4] -> <prefix>:{Q}:dead_letters  (ZSET)
-- KEYS[5] -> <prefix>:{Q}:stats       (Hash)
-- KEYS[6] -> <prefix>:{Q}:workers     (ZSET)
-- KEYS[7] -> <prefix>:{Q}:dead        (List: dead ids of older versions the reaper has not moved yet)
-- KEYS[8] -> <prefix>:{Q}:queued      (Hash: records of jobs not claimed yet)
-- Undeclared key under the same {Q} tag: the hash of the next ready job, when it has one.
-- ARGV[1] -> job key prefix
-- Returns: {now_ms, ready, processing, expired_leases, scheduled, due, dead,
--           oldest_ready_age_ms (-1 when empty), workers, stats as a flat field/value list}
--          ready counts ids of cancelled jobs no claim has popped yet.
-- Errors: none of its own.
local ready_key, processing_key, retry_key, dead_key, stats_key, workers_key, legacy_dead_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local queued_key = KEYS[8]
local now = now_ms()
local ready = redis.call('LLEN', ready_key)
local dead_list_length = 0
if redis.call('TYPE', legacy_dead_key)['ok'] == 'list' then
  dead_list_length = redis.call('LLEN', legacy_dead_key)
end
local oldest_age = -1
if ready > 0 then
  local next_id = redis.call('LINDEX', ready_key, -1)
  -- A fresh job has no queued_at: it became ready when it was created.
  -- A job never claimed is a queued field (a delayed one: ready since its due time).
  local text = redis.pcall('HGET', queued_key, next_id)
  local f
  if type(text) == 'string' then
    local r = queued_record(text, next_id)
    f = {r.queued_at, r.created_at}
  else
    f = read_fields(ARGV[1] .. next_id, 'queued_at', 'created_at')
  end
  local queued_at = tonumber(f[1]) or tonumber(f[2])
  if queued_at then oldest_age = math.max(now - queued_at, 0) end
end
return {
  now,
  ready,
  redis.call('ZCARD', processing_key),
  redis.call('ZCOUNT', processing_key, '-inf', now),
  redis.call('ZCARD', retry_key),
  redis.call('ZCOUNT', retry_key, '-inf', now),
  redis.call('ZCARD', dead_key) + dead_list_length,
  oldest_age,
  redis.call('ZCARD', workers_key),
  redis.call('HGETALL', stats_key),
}
