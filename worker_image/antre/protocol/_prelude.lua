-- Shared helpers, prepended to every antre script when it is loaded (see scripts.py).
-- Time comes from the Redis server alone (TIME), so no client clock is ever compared.
-- Scripts never stop halfway: a Lua runtime error keeps the writes made before it, so reads of
-- keys a foreign producer or a hand edit may have given the wrong type go through pcall.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The same clock as decimal text, made from TIME's own text: a value only written costs no
-- number conversion (Redis parses and prints Lua numbers with strtod and printf).
local function now_ms_text()
  local t = redis.call('TIME')
  return t[1] .. string.sub(string.rep('0', 6 - #t[2]) .. t[2], 1, 3)
end

-- Ids given per call to the scripts that remove jobs by id (replay, purge): each removal is
-- O(log N), and the cap bounds how long one call holds Redis.
local MAX_IDS_PER_CALL = 1000

-- Workers of an earlier version drop a job they find only as a queued field ("Versions" in
-- PROTOCOL.md). While one is registered (in `workers`, not in `field_readers`), enqueue writes
-- Hashes; this long after one was last seen registered, too: one that froze past its registry
-- entry (and was pruned as gone) may still come back and pop ids.
local EARLIER_WORKER_WINDOW_MS = 3600000
local function earlier_workers_registered(workers_key, field_readers_key)
  return #redis.call('ZDIFF', 2, workers_key, field_readers_key) > 0
end

-- History is a ring of HISTORY_SLOTS hash fields h:<n % slots> inside the job hash, so
-- it expires with the job and costs no extra key. Returns the field/value pair to add
-- to the caller's HSET, which keeps every transition at one write per job.
-- An entry is '<event>|<at: ms, hex>|<attempt>|<worker>|<error>', trailing empty parts left
-- out; its number n is known from its slot and the record's `events` counter. The worker is '^'
-- (SAME_WORKER) for a step of the run that the same attempt's `claimed` entry names, so a
-- claimed record keeps every value under Redis's 64-byte listpack limit (hash-max-listpack-value)
-- and stays a compact listpack instead of turning into a hashtable (about 3x the memory).
local HISTORY_SLOTS = 32
local SAME_WORKER = '^'

-- A number as the text Redis stores, converted once per call. Lua 5.1 has only doubles: each
-- number given to redis.call or joined into text costs Redis a printf, and the scripts of a
-- drain write the same few numbers (the call's clock, attempt 1, history slot 2) for every job
-- of a batch. Integers as %d (the digits Redis's own %.17g gives them); anything else as
-- tostring, as a join would write it.
local decimal_texts = {}
local function decimal(n)
  local text = decimal_texts[n]
  if text then return text end
  if n ~= math.floor(n) or n <= -2^53 or n >= 2^53 then return tostring(n) end
  text = string.format('%d', n)
  decimal_texts[n] = text
  return text
end

-- string.format('%x', n), the last n's kept (a history entry's time is the call's clock).
local hex_of, hex_text = nil, nil
local function hex(n)
  if n ~= hex_of then hex_of, hex_text = n, string.format('%x', n) end
  return hex_text
end

local function history_entry(events, event, at, attempt, worker, err)
  local n = (tonumber(events) or 0) + 1
  local attempt_number = tonumber(attempt)
  local entry = event .. '|' .. hex(at) .. '|' .. (attempt_number and decimal(attempt_number) or '')
  local has_error = err and err ~= ''
  if (worker and worker ~= '') or has_error then entry = entry .. '|' .. (worker or '') end
  if has_error then entry = entry .. '|' .. err end
  return n, 'h:' .. decimal(n % HISTORY_SLOTS), entry
end

-- A finished (done, cancelled) or dead record is written once and then only read, so it is
-- packed: one String holding a JSON array instead of a Hash, about half the memory (a Hash pays
-- for every field name, and a claimed record's fields do not fit in 300 B of Redis):
--   [type, payload (text), created_at, max_attempts, history, extras]
-- `history` holds the ring's entries oldest first, each time as hex ms after the entry before
-- (the first: after created_at); the `enqueued` entry at created_at is left out when it is
-- entry 1. Status, outcome, attempt,
-- lease, worker, last_error and the times follow from the last entry (a terminal one);
-- `extras` (left out when empty) holds what differs from that and the other fields under short
-- names. The first element, a string, marks this format (a later one would start with its
-- number). PROTOCOL.md "Packed records" is the reference; readers take both forms.
local PACKED_NAMES = {idempotency_key = 'i', resource_key = 'r', idempotency_digest = 'd',
  headers = 'H', lock_kept = 'k', expired_lease = 'x'}
-- Kept while dead, for a replay (and a late ack); a finished record drops them.
local DEAD_ONLY = {idempotency_digest = true, headers = true, expired_lease = true}
-- Where a reader finds a field that the last history entry does not give: extras[key].
local DERIVED_NAMES = {status = 's', outcome = 'o', attempt = 'a', lease = 'l', worker = 'w',
  last_error = 'e'}
-- Held in the array, derived, or of no use once the job has ended (a replay resets the
-- counters). Any other field is kept as it is, in extras.f.
local NOT_PACKED = {id = true, schema_version = true, type = true, payload = true,
  created_at = true, max_attempts = true, events = true, updated_at = true, finished_at = true,
  died_at = true, queued_at = true, releases = true, lock_deferrals = true}
local TERMINAL = {acked = {'done', 'succeeded'}, duplicate = {'done', 'duplicate'},
  cancelled = {'cancelled'}, dead = {'dead'}}

-- The time of a compact entry (ms; in a packed record, ms after the entry before) with the
-- positions of the '|' before and after it; nil for an entry in the JSON form of older versions
-- or any other text. Plain finds and few substrings: this runs for every entry of every record
-- packed or read, inside the ack.
local function entry_time(entry)
  local first = string.find(entry, '|', 1, true)
  if not first or string.byte(entry, 1) == 123 then return nil end
  local second = string.find(entry, '|', first + 1, true)
  local text = string.sub(entry, first + 1, (second or 0) - 1)
  if string.byte(text, 1) == 45 then  -- '-'
    local magnitude = tonumber(string.sub(text, 2), 16)
    return magnitude and -magnitude, first, second
  end
  return tonumber(text, 16), first, second
end

-- The entry with its time replaced by `at`.
local function with_time(entry, at, first, second)
  local text
  if at < 0 then text = '-' .. string.format('%x', -at) else text = string.format('%x', at) end
  return string.sub(entry, 1, first) .. text .. (second and string.sub(entry, second) or '')
end

-- The worker part of a compact entry ('' or '^' when it names none), or nil.
local function entry_worker(entry)
  if string.byte(entry, 1) == 123 then return nil end
  local position = 0
  for _ = 1, 3 do
    position = string.find(entry, '|', position + 1, true)
    if not position then return nil end
  end
  local after = string.find(entry, '|', position + 1, true)
  return string.sub(entry, position + 1, (after or 0) - 1)
end

-- What a history (absolute entries, oldest first) says about the record: the last entry gives
-- status, outcome, attempt, time and (dead) the error; the worker is the last one named.
local function history_summary(entries)
  local summary = {}
  for i = #entries, 1, -1 do
    local named = entry_worker(entries[i])
    if named and named ~= '' and named ~= SAME_WORKER then
      summary.worker = named
      break
    end
  end
  local last = entries[#entries]
  local at = last and entry_time(last)
  if not at then return summary end
  local p1 = string.find(last, '|', 1, true)
  local p2 = string.find(last, '|', p1 + 1, true)
  local p3 = p2 and string.find(last, '|', p2 + 1, true)
  local p4 = p3 and string.find(last, '|', p3 + 1, true)
  local event = string.sub(last, 1, p1 - 1)
  local attempt = p2 and string.sub(last, p2 + 1, (p3 or 0) - 1)
  local err = p4 and string.sub(last, p4 + 1)
  local terminal = TERMINAL[event] or {}
  summary.status, summary.outcome, summary.at = terminal[1], terminal[2], at
  if attempt and attempt ~= '' then summary.attempt = attempt end
  if summary.status == 'dead' and err and err ~= '' then summary.last_error = err end
  return summary
end

-- A stored integer as a JSON number when that is exact, else as it is stored.
local function json_integer(text)
  if type(text) == 'string' and #text <= 14 and string.find(text, '^%d+$') then
    return tonumber(text)
  end
  return text
end

-- The JSON cjson writes for json_integer(text), without the number's parse and print when the
-- text is already those digits (no leading zero).
local function json_integer_text(text)
  if type(text) == 'string' and #text <= 14 and string.find(text, '^[1-9]%d*$') then
    return text
  end
  return cjson.encode(json_integer(text))
end

-- A decoded JSON value as the text a hash field holds; nil for null, false or anything else.
local function stored_text(value)
  if type(value) == 'number' then return string.format('%d', value) end
  if type(value) == 'string' then return value end
  return nil
end

local function by_number(a, b) return a[1] < b[1] end

-- What a packed record does with a field it treats by name: its short name in extras, or true
-- when the array holds it or a reader derives it (any other field goes to extras.f as it is).
-- Built on first use: the prelude runs on every call of every script, and most calls (a
-- single enqueue, a claim, a renewal) pack nothing.
local field_roles = nil
local function packing_roles()
  if not field_roles then
    field_roles = {}
    for name in pairs(NOT_PACKED) do field_roles[name] = true end
    for name in pairs(DERIVED_NAMES) do field_roles[name] = true end
    for name, short in pairs(PACKED_NAMES) do field_roles[name] = short end
  end
  return field_roles
end

-- The packed text of a record given as HGETALL's flat field/value list. A name given twice
-- keeps its last value, except the ring's h:<slot> fields: each one given is an entry.
local function pack_record(flat)
  local r, extras, steps, others = {}, {}, nil, nil
  local slots, entries, roles = {}, {}, packing_roles()
  for i = 1, #flat, 2 do
    local name, value = flat[i], flat[i + 1]
    local role = roles[name]
    if role then
      r[name] = value
      if role ~= true then extras[role] = value end
    elseif string.byte(name, 1) == 104 and string.find(name, '^h:%d+$') then
      slots[#slots + 1] = tonumber(string.sub(name, 3))
      entries[#entries + 1] = value
    elseif string.find(name, 'step:', 1, true) == 1 then
      steps = steps or {}
      steps[string.sub(name, 6)] = value
    else
      others = others or {}
      others[name] = value
    end
  end
  if r.status ~= 'dead' then
    for name in pairs(DEAD_ONLY) do extras[PACKED_NAMES[name]] = nil end
  end
  -- Entry numbers from the ring slots; a ring that has not wrapped is in order already.
  local events = tonumber(r.events) or 0
  local count, ordered = #slots, true
  for i = 1, count do
    slots[i] = events - (events - slots[i]) % HISTORY_SLOTS
    if i > 1 and slots[i] < slots[i - 1] then ordered = false end
  end
  if not ordered then
    local numbered = {}
    for i = 1, count do numbered[i] = {slots[i], entries[i]} end
    table.sort(numbered, by_number)
    for i = 1, count do slots[i], entries[i] = numbered[i][1], numbered[i][2] end
  end
  local created = tonumber(r.created_at)
  local implied = created ~= nil and count == events and count > 0 and slots[1] == 1
    and entries[1] == 'enqueued|' .. string.format('%x', created) .. '|0'
  local history, previous = {}, created
  for i = implied and 2 or 1, count do
    local entry = entries[i]
    if created then
      local at, first, second = entry_time(entry)
      if at then
        entry = with_time(entry, at - previous, first, second)
        previous = at
      end
    end
    history[#history + 1] = entry
  end
  if not implied then extras.n = events end
  local derived = history_summary(entries)
  derived.lease = r.attempt
  for name, key in pairs(DERIVED_NAMES) do
    if r[name] ~= derived[name] then extras[key] = r[name] or false end
  end
  extras.S, extras.f = steps, others
  local packed = {r.type or '', r.payload or cjson.null, json_integer(r.created_at) or cjson.null,
    json_integer(r.max_attempts) or cjson.null, history}
  if next(extras) ~= nil then packed[6] = extras end
  return cjson.encode(packed)
end

-- The fields a record of one plain run holds (no idempotency key, resource, headers, steps,
-- error or foreign field), and those of them a packed record leaves out.
local ONE_RUN_FIELDS = {'id', 'type', 'payload', 'created_at', 'max_attempts', 'status',
  'attempt', 'lease', 'worker', 'updated_at', 'events', 'schema_version', 'h:1', 'h:2',
  'queued_at', 'releases', 'lock_deferrals'}

-- pack_record's text for the commonest record an ack finishes, built without its general
-- walk: enqueued, claimed once, now acked at `now` (`r`: the record's fields before the ack,
-- as field -> value; `field_count`: how many it has). nil for any other record, which the
-- caller packs with pack_record. tests/protocol/test_packed_records.py holds the two to the
-- same text.
local function packed_one_run(r, field_count, now)
  local present = 0
  for _, name in ipairs(ONE_RUN_FIELDS) do
    if r[name] then present = present + 1 end
  end
  local created, claimed = tonumber(r.created_at), r['h:2']
  if present ~= field_count or r.events ~= '2' or not created or not claimed
      or not (r.type and r.payload and r.max_attempts) or r.lease ~= r.attempt
      or r['h:1'] ~= 'enqueued|' .. string.format('%x', created) .. '|0' then
    return nil
  end
  local at, first, second = entry_time(claimed)
  if not at or string.sub(claimed, 1, first) ~= 'claimed|' or not second then return nil end
  local third = string.find(claimed, '|', second + 1, true)
  if not third or string.find(claimed, '|', third + 1, true)
      or string.sub(claimed, second + 1, third - 1) ~= r.attempt
      or string.sub(claimed, third + 1) ~= r.worker or r.worker == SAME_WORKER then
    return nil
  end
  if now < at then return nil end
  local _, _, acked = history_entry(2, 'acked', now - at, r.attempt, SAME_WORKER, nil)
  return '[' .. cjson.encode(r.type) .. ',' .. cjson.encode(r.payload) .. ','
    .. json_integer_text(r.created_at) .. ',' .. json_integer_text(r.max_attempts) .. ','
    .. cjson.encode({with_time(claimed, at - created, first, second), acked}) .. ']'
end

-- The decoded array of a packed record's text; nil for text that is not one. On its own for
-- the enqueue, which only asks whether a String job key is a record: a script is loaded with
-- the prelude it names, and unpack_record's helpers cost Redis time on every call.
local function packed_array(text)
  if type(text) ~= 'string' or string.sub(text, 1, 2) ~= '["' then return nil end
  local ok, packed = pcall(cjson.decode, text)
  if not ok or type(packed) ~= 'table' then return nil end
  return packed
end

-- The record a packed text holds, as field -> value (the fields its Hash form would have);
-- nil for text that is not a packed record.
local function unpack_record(text, id)
  local packed = packed_array(text)
  if not packed then return nil end
  local extras = type(packed[6]) == 'table' and packed[6] or {}
  local history = type(packed[5]) == 'table' and packed[5] or {}
  local r = {id = id, schema_version = '1', type = stored_text(packed[1]),
    payload = stored_text(packed[2]), created_at = stored_text(packed[3]),
    max_attempts = stored_text(packed[4])}
  if r.type == '' then r.type = nil end
  local created = tonumber(r.created_at)
  local events, absolute = tonumber(extras.n), {}
  if not events then
    events = #history + 1
    absolute[1] = 'enqueued|' .. string.format('%x', created or 0) .. '|0'
  end
  local previous = created
  for _, entry in ipairs(history) do
    entry = stored_text(entry) or ''
    local offset, first, second = entry_time(entry)
    if offset and created then
      previous = previous + offset
      entry = with_time(entry, previous, first, second)
    end
    absolute[#absolute + 1] = entry
  end
  for i, entry in ipairs(absolute) do
    r['h:' .. ((events - #absolute + i) % HISTORY_SLOTS)] = entry
  end
  r.events = string.format('%d', events)
  local summary = history_summary(absolute)
  for name, key in pairs(DERIVED_NAMES) do
    if extras[key] == nil then r[name] = summary[name] else r[name] = stored_text(extras[key]) end
  end
  if extras.l == nil then r.lease = r.attempt end
  if summary.at then
    r.updated_at = string.format('%d', summary.at)
    if r.status == 'dead' then r.died_at = r.updated_at elseif r.status then r.finished_at = r.updated_at end
  end
  for name, key in pairs(PACKED_NAMES) do r[name] = stored_text(extras[key]) end
  if type(extras.S) == 'table' then
    for name, value in pairs(extras.S) do r['step:' .. name] = stored_text(value) end
  end
  if type(extras.f) == 'table' then
    for name, value in pairs(extras.f) do r[name] = stored_text(value) end
  end
  return r
end

-- A job enqueued and not claimed yet is a field of the queue's `queued` Hash: id -> a JSON
-- array, [type, payload (text), created_at, max_attempts, extras], the head of a packed record.
-- A Hash per job costs about 140 B of Redis before its first field; a field of one shared Hash
-- about 106 B with its value. `extras` (left out when empty) holds `q` (the due time of a job
-- enqueued with a delay) and the short names of PACKED_NAMES (`i` idempotency_key, `d` its
-- digest, `r` resource_key, `H` headers). Everything else is implied: attempt and lease 0, the
-- `enqueued` history entry at created_at, and the status: `scheduled` while the id is in the
-- retry set, `queued` after. The claim turns the field into the job's Hash; every other live
-- state keeps its Hash, so an id names a job while its field or its key exists.
-- Written as text around cjson's strings: created_at (now_ms_text) and max_attempts (checked to
-- be digits) go in as they came, where a Lua number costs a parse and cjson's number printer;
-- over 14 digits max_attempts stays a string (json_integer_text).
local function queued_value(job_type, payload, created_at, max_attempts, extras)
  local text = '[' .. cjson.encode(job_type) .. ',' .. cjson.encode(payload) .. ','
    .. created_at .. ',' .. json_integer_text(max_attempts)
  if extras then text = text .. ',' .. cjson.encode(extras) end
  return text .. ']'
end

-- The record a queued field holds, as field -> value (the fields of its Hash form, status
-- 'queued'). A value that does not decode (a hand edit) gives a record without its counters,
-- which the claim dead-letters as malformed with the value kept in `queued_value`.
local function queued_record(text, id)
  local ok, packed = pcall(cjson.decode, text)
  if not ok or type(packed) ~= 'table' then
    return {id = id, status = 'queued', queued_value = text}
  end
  local r = {id = id, type = stored_text(packed[1]), payload = stored_text(packed[2]),
    created_at = stored_text(packed[3]), max_attempts = stored_text(packed[4]),
    status = 'queued', attempt = '0', lease = '0', schema_version = '1', events = '1'}
  local created = tonumber(r.created_at)
  if created then r['h:1'] = 'enqueued|' .. string.format('%x', created) .. '|0' end
  -- This runs for every job a claim pops: the usual job has no extras.
  local extras = packed[5]
  if type(extras) == 'table' then
    r.queued_at = stored_text(extras.q)
    for name, key in pairs(PACKED_NAMES) do r[name] = stored_text(extras[key]) end
  end
  return r
end

-- A record table as the flat field/value list HSET takes, appended to `flat` if given.
local function flat_fields(r, flat)
  flat = flat or {}
  local n = #flat
  for name, value in pairs(r) do
    flat[n + 1], flat[n + 2] = name, value
    n = n + 2
  end
  return flat
end

-- The record of a job still in the queued Hash, its status from where its id waits; nil when
-- the id has no field there.
local function queued_job(queued_key, retry_key, id)
  local text = redis.pcall('HGET', queued_key, id)
  if type(text) ~= 'string' then return nil end
  local r = queued_record(text, id)
  if redis.call('ZSCORE', retry_key, id) then r.status = 'scheduled' end
  return r
end

-- The record at `key` as field -> value, whichever form it has; nil when there is none (or
-- the key holds something that is not a record). `id` is a packed record's id (its key's tail).
local function record_table(key, id)
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'hash' then
    local flat, r = redis.call('HGETALL', key), {}
    for i = 1, #flat, 2 do r[flat[i]] = flat[i + 1] end
    return r
  elseif kind == 'string' then
    return unpack_record(redis.call('GET', key), id)
  end
  return nil
end

-- HMGET of a record in either form; an empty record for a key that holds no record (a foreign
-- key of the wrong type) instead of raising.
local function read_fields(key, ...)
  local f = redis.pcall('HMGET', key, ...)
  if not f.err then return f end
  local record = record_table(key)
  if not record then return {} end
  local values = {}
  for i, name in ipairs({...}) do values[i] = record[name] or false end
  return values
end

-- Packs the record at `key` (a Hash) in place, kept for ttl_ms (0: no expiry).
local function pack_in_place(key, ttl_ms)
  local text = pack_record(redis.call('HGETALL', key))
  if ttl_ms > 0 then
    redis.call('SET', key, text, 'PX', ttl_ms)
  else
    redis.call('SET', key, text)
  end
end

-- `command key value...` for any number of values, 1,000 per call (an even count, so pairs
-- stay together): Lua's unpack has a limit of a few thousand values.
local function call_in_chunks(command, key, values)
  for first = 1, #values, 1000 do
    redis.call(command, key, unpack(values, first, math.min(first + 999, #values)))
  end
end

-- Turns a packed record back into its Hash (a dead job replayed, cancelled or late-acked), so
-- the script goes on with HSET as for any live record. A Hash is left as it is.
local function unpack_in_place(key, id)
  if redis.call('TYPE', key)['ok'] ~= 'string' then return end
  local r = unpack_record(redis.call('GET', key), id)
  if not r then return end
  redis.call('DEL', key)
  call_in_chunks('HSET', key, flat_fields(r))
end

-- Moves a job to the dead letters with its reason; the caller counts it in the stats. `extra`
-- holds more field/value pairs for the same HSET. The dead letters are a ZSET, so removal by
-- id is O(log N), scored by the Redis clock in microseconds, so "newest first" is exact even
-- for jobs that died in the same millisecond; a death in the same microsecond as the one
-- before it in this script is scored a microsecond after that one. No score runs ahead of the
-- clock by more than such ties: a replay of the oldest (replay.lua) relies on a job it
-- replayed dying again above every score the list held when the replay began. (A sequence
-- added to every score, as earlier versions did, put the last deaths of a reaper pass of
-- 1,000 a millisecond ahead.)
local last_dead_score = 0
local function dead_letter(job_key, dead_key, id, now, events, attempt, worker, reason, extra)
  local n, hfield, hvalue = history_entry(events, 'dead', now, attempt, worker, reason)
  local fields = {'status', 'dead', 'last_error', reason, 'updated_at', now, 'died_at', now,
    'events', n, hfield, hvalue}
  for _, value in ipairs(extra or {}) do fields[#fields + 1] = value end
  redis.call('HSET', job_key, unpack(fields))
  pack_in_place(job_key, 0)
  local t = redis.call('TIME')
  last_dead_score = math.max(tonumber(t[1]) * 1000000 + tonumber(t[2]), last_dead_score + 1)
  redis.call('ZADD', dead_key, last_dead_score, id)
end

-- The holder of a resource lock ('<id>:<lease>') or nil, and true when the key has the wrong
-- type (GET answers false, not nil, for a missing key).
local function lock_holder(lock_key)
  local holder = redis.pcall('GET', lock_key)
  if type(holder) == 'table' then return nil, true end
  if not holder then return nil, false end
  return holder, false
end

-- Compare-and-delete: only the holder's token frees a resource lock. True when it did.
local function release_lock(lock_prefix, resource_key, token)
  if resource_key and resource_key ~= '' then
    local lock_key = lock_prefix .. resource_key
    if lock_holder(lock_key) == token then
      redis.call('DEL', lock_key)
      return true
    end
  end
  return false
end

local function zrem_all(key, members) call_in_chunks('ZREM', key, members) end

-- A run that held a resource succeeded and freed its lock: the job that has waited longest for
-- that resource (claim.lua records deferred jobs in waiting:<resource>, ordered by their first
-- deferral) goes to the head of the queue now instead of at its next re-check. One job: only
-- one can take the lock, the others keep their place and their re-check. Entries of jobs that
-- no longer wait there (running, ran, cancelled, retrying after a failure) are dropped, at most
-- WAKE_SCAN_LIMIT per call so that no ack waits on a long line of them (a resource held for
-- hours while jobs for it came and went); the next call goes on where this one stopped.
local WAKE_SCAN_LIMIT = 100
local function wake_next_waiter(waiting_key, ready_key, retry_key, job_prefix, now)
  for _ = 1, WAKE_SCAN_LIMIT do
    local id = redis.call('ZRANGE', waiting_key, 0, 0)[1]
    if not id then return end
    local job_key = job_prefix .. id
    if redis.pcall('HGET', job_key, 'status') == 'scheduled'
        and redis.call('ZREM', retry_key, id) == 1 then
      redis.call('HSET', job_key, 'status', 'queued', 'queued_at', now)
      redis.call('RPUSH', ready_key, id)
      return
    end
    redis.call('ZREM', waiting_key, id)
  end
end

-- Moves due ids from the retry ZSET to the head of the ready list, earliest due first. A job
-- delayed at enqueue is still a field of the queued Hash, whose status follows from where its
-- id is: moving the id is all it needs.
local function promote_due(ready_key, retry_key, queued_key, job_prefix, now, limit)
  local due = redis.call('ZRANGEBYSCORE', retry_key, '-inf', now, 'LIMIT', 0, limit)
  local n = #due
  if n == 0 then return 0 end
  zrem_all(retry_key, due)
  for i = n, 1, -1 do
    local id = due[i]
    if redis.pcall('HEXISTS', queued_key, id) == 1 then
      redis.call('RPUSH', ready_key, id)
    else
      local job_key = job_prefix .. id
      -- A live job always has its record; a missing one (evicted) is dropped, not resurrected.
      -- Only a job waiting to run is requeued: a record that runs or has finished under the
      -- same id (reused by a producer) is left to its own lease or end, never made `queued`
      -- again behind its lease holder's back.
      local status = redis.pcall('HGET', job_key, 'status')
      if status == 'scheduled' or status == 'retrying' or status == 'queued' then
        redis.call('HSET', job_key, 'status', 'queued', 'queued_at', now)
        redis.call('RPUSH', ready_key, id)
      end
    end
  end
  return n
end

-- A finished (done or cancelled) record is kept packed for done_ttl_ms, or deleted at once
-- when 0.
local function keep_finished(job_key, done_ttl_ms)
  if done_ttl_ms > 0 then
    pack_in_place(job_key, done_ttl_ms)
  else
    redis.call('DEL', job_key)
  end
end

-- An idempotency marker is '<id>' or '<id>|<digest>' while its job is live, with '|done'
-- appended once the job succeeded. The digest (of the job's type and payload) tells a retried
-- enqueue from a different request reusing the key. Returns id, digest ('' if none), done.
local function parse_marker(marker)
  local id, rest = string.match(marker, '^([^|]*)(.*)$')
  local done = string.sub(rest, -5) == '|done'
  if done then rest = string.sub(rest, 1, -6) end
  return id, string.match(rest, '^|([^|]+)$') or '', done
end

local function marker_text(id, digest, done)
  local text = id
  if digest and digest ~= '' then text = text .. '|' .. digest end
  if done then text = text .. '|done' end
  return text
end

-- Deletes a job's idempotency key if it still points at that job (a newer job may own it).
local function drop_idempotency_key(idem_prefix, idem, id)
  if not idem then return end
  local marker = redis.pcall('GET', idem_prefix .. idem)
  if type(marker) == 'string' and parse_marker(marker) == id then
    redis.call('DEL', idem_prefix .. idem)
  end
end

-- The dead ids a replay or purge works on, and the cutoff it used: the ids given from
-- ARGV[first] on (each removed from the dead letters, unknown ones skipped; cutoff ''), or
-- else up to `limit` of the oldest letters scored at or below `cutoff`. '' there, the first
-- call of a replay or purge of the oldest, takes the newest score in the list now ('' when
-- it is empty), which the caller answers for the later calls to pass on: a job that dies after
-- that call is scored above every score the list held (dead_letter; while the Redis clock does
-- not go back), so no later call takes it. Every id returned is off the list.
local function take_dead(dead_key, first, limit, cutoff)
  local ids = {}
  if #ARGV >= first then
    for i = first, #ARGV do
      if redis.call('ZREM', dead_key, ARGV[i]) == 1 then ids[#ids + 1] = ARGV[i] end
    end
    return ids, ''
  end
  if cutoff == '' then
    cutoff = redis.call('ZRANGE', dead_key, -1, -1, 'WITHSCORES')[2]
    if not cutoff then return ids, '' end
  end
  ids = redis.call('ZRANGEBYSCORE', dead_key, '-inf', cutoff, 'LIMIT', 0, limit)
  zrem_all(dead_key, ids)
  return ids, cutoff
end

local function too_many_ids(first)
  if #ARGV - first + 1 > MAX_IDS_PER_CALL then
    return redis.error_reply('ANTRE_INVALID ids: got ' .. (#ARGV - first + 1)
      .. '; at most ' .. MAX_IDS_PER_CALL .. ' per call')
  end
  return nil
end

-- ZMSCORE of any number of members, in chunks: one score (or false) per member.
local function zmscore_all(key, members)
  local scores = {}
  for first = 1, #members, 1000 do
    local part = redis.call('ZMSCORE', key, unpack(members, first, math.min(first + 999, #members)))
    for _, score in ipairs(part) do scores[#scores + 1] = score end
  end
  return scores
end

-- A lease is held by a run while its job is processing under that token, claimed by that
-- worker, before its deadline, and (for a job with a resource) while the resource lock is still
-- the run's own. `f` holds status, lease, worker and resource_key; `deadline` is the job's
-- score in the processing set. Returns true, or false and why.
local function lease_held(f, id, lease, worker, deadline, now, lock_prefix)
  if f[1] ~= 'processing' or f[2] ~= lease or f[3] ~= worker then
    return false, 'not the current lease (requeued, settled, or claimed by another worker)'
  end
  if not deadline or tonumber(deadline) < now then
    return false, 'the lease deadline has passed (the reaper requeues the job)'
  end
  if f[4] and lock_holder(lock_prefix .. f[4]) ~= id .. ':' .. lease then
    return false, 'resource lock ' .. f[4] .. ' is no longer this run\'s'
  end
  return true, nil
end

-- A settle call of a run (fail, release) sent again after its reply was lost finds the job
-- settled by its first sending: it is answered from the record, so its worker learns what the
-- first sending did (and that it keeps the resource lock, when it did). Returns the event, time
-- (ms) and error of the history entry that settled the run under `lease` on `worker`, or nil
-- when the record is no longer at that lease and worker, or the run is still processing. That
-- entry is the newest one, or the newest before the `deferred` entries of claims that found the
-- resource still locked (they leave lease and worker as they are), and written in the run's own
-- name (SAME_WORKER), as fail and release write theirs; the caller tells its own call from its
-- event, error and lock_kept. `r` is the record as record_table reads it (either form).
local function run_settled_entry(r, lease, worker)
  if not r or r.lease ~= lease or r.worker ~= worker or r.status == 'processing' then
    return nil
  end
  local events = tonumber(r.events) or 0
  for n = events, math.max(events - HISTORY_SLOTS + 1, 1), -1 do
    local entry = r['h:' .. decimal(n % HISTORY_SLOTS)]
    if type(entry) ~= 'string' then return nil end
    local at, first, second = entry_time(entry)
    if not (at and second) then return nil end
    local event = string.sub(entry, 1, first - 1)
    if event ~= 'deferred' then
      local third = string.find(entry, '|', second + 1, true)
      local fourth = third and string.find(entry, '|', third + 1, true)
      if not third or string.sub(entry, third + 1, (fourth or 0) - 1) ~= SAME_WORKER then
        return nil
      end
      return event, at, fourth and string.sub(entry, fourth + 1) or ''
    end
  end
  return nil
end

-- The lease of a processing job ran out (its worker died, froze, or lost Redis): the attempt
-- counts. The job goes back to the head of the queue, or to the dead letters when that was its
-- last attempt (then `expired_lease` remembers the lease, so a late ack of it still counts).
-- The caller has removed the id from the processing set. `f` holds status, lease, attempt,
-- max_attempts, resource_key, events, worker. Returns 'requeued' or 'dead', and whether it
-- freed the resource lock (it may have expired with the lease and gone to another job).
local function expire_lease(job_key, id, f, now, ready_key, dead_key, lock_prefix)
  local freed = release_lock(lock_prefix, f[5], id .. ':' .. (f[2] or ''))
  local attempt, max_attempts = tonumber(f[3]) or 0, tonumber(f[4]) or 0
  local reason = 'lease expired during attempt ' .. attempt .. ' (worker '
    .. (f[7] or '?') .. ' lost or frozen past its lease, or cut off from Redis)'
  if attempt >= max_attempts then
    dead_letter(job_key, dead_key, id, now, f[6], attempt, SAME_WORKER, reason,
      {'expired_lease', f[2] or ''})
    return 'dead', freed
  end
  local n, hfield, hvalue = history_entry(f[6], 'lease_expired', now, attempt, SAME_WORKER,
    reason)
  redis.call('HSET', job_key, 'status', 'queued', 'last_error', reason, 'updated_at', now,
    'queued_at', now, 'events', n, hfield, hvalue)
  -- To the head: it has waited a whole lease already.
  redis.call('RPUSH', ready_key, id)
  return 'requeued', freed
end
