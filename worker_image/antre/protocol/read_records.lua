-- read_records: job records as they are stored, a Hash or packed (see _prelude.lua), for the
-- inspection tools (antre job, the HTTP API, the dashboard, antre inspect). Read only.
-- KEYS -> job keys <prefix>:{Q}:job:<id>, all of one queue
-- ARGV[1] -> job key prefix (a packed record's id is the rest of its key)
-- ARGV[2..] -> field names; none: every field
-- Returns: per key, with names, their values in order (nil when missing); without, the
--          record's field/value pairs, empty when there is no record.
-- Errors: none of its own.
local prefix = ARGV[1]
local names = {}
for i = 2, #ARGV do names[#names + 1] = ARGV[i] end
local reply = {}
for i, key in ipairs(KEYS) do
  local record = record_table(key, string.sub(key, #prefix + 1))
  local values = {}
  if #names > 0 then
    for j, name in ipairs(names) do values[j] = record and record[name] or false end
  elseif record then
    for name, value in pairs(record) do
      values[#values + 1] = name
      values[#values + 1] = value
    end
  end
  reply[i] = values
end
return reply
