-- release: give leased jobs back to the head of the queue: at a graceful shutdown (event
-- `released`), or prefetched jobs a worker hands back unstarted because the work outgrew its
-- buffer (event `handed_back`: routine, so counted apart from shutdowns). The attempt is
-- given back for the first `free_releases` releases of a job; after that a release spends it,
-- so a job that never finishes within a grace period ends dead instead of looping (a run that
-- never started does not count: it always gets its attempt back). A release
-- after the lease's deadline (the worker was frozen or cut off) spends it too, as the reaper's
-- requeue of that expired lease would have.
-- KEYS[1] -> <prefix>:{Q}:queue         (List)
-- KEYS[2] -> <prefix>:{Q}:processing    (ZSET)
-- KEYS[3] -> <prefix>:{Q}:stats         (Hash)
-- KEYS[4] -> <prefix>:{Q}:dead_letters  (ZSET)
-- KEYS[5] -> <prefix>:{Q}:retry         (ZSET)
-- Undeclared keys under the same {Q} tag: job hashes, resource locks and waiting:<resource>.
-- ARGV[1] -> job key prefix, ARGV[2] -> lock key prefix, ARGV[3] -> worker id (the claimer's)
-- ARGV[4] -> reason (kept in the history)
-- ARGV[5] -> free_releases (releases per job that give the attempt back)
-- ARGV[6] -> waiting key prefix: a job dead-lettered here never takes its resource again, so
--            once its lock is free the first job still waiting for it is woken, as ack does
-- ARGV[7] -> event: 'released' or 'handed_back', the history entry and the stats counter it
--            writes for each job put back in the queue (a job dead-lettered counts as `dead`).
--            Earlier versions had no event (triples from ARGV[7], always `released`); each
--            worker runs the copy it loaded (by its SHA), so neither sees the other's layout.
-- ARGV[8..] -> triples: job id, lease token, run state (1: the run may still be going, a
--              handler thread that cannot be stopped: its lock is left to its worker, which
--              frees it when the run returns or lets it expire; 0: free the lock now; 2: the
--              run never started (prefetched, or a claim given back): the lock is freed and
--              the release is not counted, so the attempt is given back however often the job
--              was released before, unless the lease's deadline has passed)
-- Returns: one integer per triple: 1 back in the queue, 2 dead-lettered (out of attempts), 0 not
--          the lease holder (nothing changed). A triple this worker's release of the lease
--          already settled (the call sent again after its reply was lost) gets that release's
--          answer, 1 or 2, and changes nothing: the record is still at that lease and worker,
--          and its newest history entry (but for a claim's `deferred`: the job waiting for the
--          lock the release kept) is the one a release with this event and reason wrote (the
--          event, or `dead`), with lock_kept naming the lease exactly when the state is 1 and the
--          job has a resource. Its worker then knows that it keeps the lock (earlier versions
--          answered 0).
-- Errors: ANTRE_INVALID when ARGV[7] is not one of the two events (nothing is written).
local ready_key, processing_key, stats_key, dead_key, retry_key = KEYS[1], KEYS[2], KEYS[3],
  KEYS[4], KEYS[5]
local job_prefix, lock_prefix, worker, reason = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local free_releases, waiting_prefix, event = tonumber(ARGV[5]), ARGV[6], ARGV[7]
-- The event names a field of the stats hash: anything else would grow it without bound.
if event ~= 'released' and event ~= 'handed_back' then
  return redis.error_reply('ANTRE_INVALID event: got ' .. string.sub(tostring(event), 1, 100)
    .. '; must be released or handed_back')
end
local now = now_ms()
local result, released, records = {}, {}, {}

-- The answer of a release of this lease by this worker, with this event and reason, that has
-- already settled the job (see Returns), else 0.
local function already_released(id, lease, keep_lock)
  local r = record_table(job_prefix .. id, id)
  local settled_by, _, text = run_settled_entry(r, lease, worker)
  if not ((settled_by == event or settled_by == 'dead')
      and string.sub(text, 1, #reason) == reason) then
    return 0
  end
  -- Only a lock is kept: a job without a resource has none, and its record no lock_kept.
  if (keep_lock and r.resource_key ~= nil) ~= (r.lock_kept == lease) then return 0 end
  return settled_by == 'dead' and 2 or 1
end
local ids = {}
for i = 8, #ARGV, 3 do ids[#ids + 1] = ARGV[i] end
local deadlines = zmscore_all(processing_key, ids)

for i = 8, #ARGV, 3 do
  local id, lease = ARGV[i], ARGV[i + 1]
  local deadline = tonumber(deadlines[(i - 5) / 3])
  local f = read_fields(job_prefix .. id, 'status', 'lease', 'attempt', 'resource_key', 'events',
    'worker', 'releases', 'max_attempts')
  if f[1] == 'processing' and f[2] == lease and f[6] == worker then
    released[#released + 1] = id
    result[#result + 1] = 1
    records[#records + 1] = {id, lease, f, ARGV[i + 2] == '1', deadline and deadline < now,
      #result, ARGV[i + 2] == '2'}
  else
    result[#result + 1] = already_released(id, lease, ARGV[i + 2] == '1')
  end
end
if #released == 0 then return result end

-- ZREM first: it cannot grow memory, so a Redis at maxmemory still admits the release.
zrem_all(processing_key, released)
local requeued, dead = 0, 0
for _, record in ipairs(records) do
  local id, lease, f, keep_lock, expired, slot, unstarted = record[1], record[2], record[3],
    record[4], record[5], record[6], record[7]
  local job_key = job_prefix .. id
  local releases = (tonumber(f[7]) or 0) + 1
  local attempt = tonumber(f[3]) or 1
  local extra = {'releases', releases}
  if unstarted then  -- never ran: not one of the releases that bound a job never finishing
    releases = releases - 1
    extra = {}
  end
  if (unstarted or releases <= free_releases) and not expired then
    attempt = math.max(attempt - 1, 0)
  end
  local why = expired and (reason .. ' (after its lease expired: the attempt counts)') or reason
  -- Only a lock is kept: a job without a resource has none, and its record no field for it.
  if keep_lock and f[4] then
    extra[#extra + 1] = 'lock_kept'
    extra[#extra + 1] = lease
  else
    release_lock(lock_prefix, f[4], id .. ':' .. lease)
  end
  if attempt >= (tonumber(f[8]) or 0) then
    extra[#extra + 1] = 'attempt'
    extra[#extra + 1] = attempt
    -- A hand-back never ran the job: only an expired lease spends its attempt, and the
    -- shutdown's question about the grace period does not apply.
    local out_of_attempts = event == 'handed_back' and '; out of attempts' or ('; released '
      .. releases .. ' times without finishing, out of attempts (is the grace period shorter '
      .. 'than the job?)')
    dead_letter(job_key, dead_key, id, now, f[5], attempt, SAME_WORKER, why .. out_of_attempts,
      extra)
    dead = dead + 1
    result[slot] = 2
    if f[4] and not keep_lock then
      local holder, wrong_type = lock_holder(lock_prefix .. f[4])
      if not holder and not wrong_type then
        wake_next_waiter(waiting_prefix .. f[4], ready_key, retry_key, job_prefix, now)
      end
    end
  else
    -- The history names the run given back (f[3]); the counter may step back for the next
    -- claim.
    local n, hfield, hvalue = history_entry(f[5], event, now, f[3], SAME_WORKER, why)
    redis.call('HSET', job_key, 'status', 'queued', 'attempt', attempt, 'updated_at', now,
      'queued_at', now, 'events', n, hfield, hvalue, unpack(extra))
    redis.call('RPUSH', ready_key, id)
    requeued = requeued + 1
  end
end
if requeued > 0 then redis.call('HINCRBY', stats_key, event, requeued) end
if dead > 0 then redis.call('HINCRBY', stats_key, 'dead', dead) end
return result
