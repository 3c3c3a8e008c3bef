-- read_records: job records as they are stored, for the inspection tools (antre job, the HTTP
-- API, the dashboard, antre inspect): a job not claimed yet is a field of the queued Hash, any
-- other a Hash, or packed once finished or dead (see _prelude.lua). Read only.
-- KEYS[1] -> <prefix>:{Q}:queued  (Hash, id -> the packed record of a job not claimed yet)
-- KEYS[2] -> <prefix>:{Q}:retry   (ZSET: a queued field whose id is here is `scheduled`)
-- KEYS[3..] -> job keys <prefix>:{Q}:job:<id>, all of that queue
-- ARGV[1] -> job key prefix (a record's id is the rest of its key)
-- ARGV[2..] -> field names; none: every field
-- Returns: per job key, with names, their values in order (nil when missing); without, the
--          record's field/value pairs, empty when there is no record.
-- Errors: none of its own.
local queued_key, retry_key = KEYS[1], KEYS[2]
local prefix = ARGV[1]
local names = {}
for i = 2, #ARGV do names[#names + 1] = ARGV[i] end
local reply = {}
for i = 3, #KEYS do
  local key = KEYS[i]
  local id = string.sub(key, #prefix + 1)
  local record = record_table(key, id) or queued_job(queued_key, retry_key, id)
  local values = {}
  if #names > 0 then
    for j, name in ipairs(names) do values[j] = record and record[name] or false end
  elseif record then
    values = flat_fields(record)
  end
  reply[#reply + 1] = values
end
return reply
