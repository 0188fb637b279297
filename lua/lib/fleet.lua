-- lib/fleet.lua: reading the fleet's record (<prefix>meta, see
-- fleet_beat.lua) as fleet_beat.lua and fleet_format.lua both must: a
-- field another hand wrote wrong is read as nothing, never an error that
-- would stop every beat.

-- An instance record this build can read: JSON with its beat's time and
-- the formats it writes; nil for anything else (a hand's edit, a record
-- cut short), which is then dropped as a stale one is.
local function fleet_record(text)
  local ok, fields = pcall(cjson.decode, text)
  if not ok or type(fields) ~= 'table' or type(fields.seen_at_ms) ~= 'number'
      or type(fields.writes) ~= 'table' or type(fields.writes[1]) ~= 'number'
      or type(fields.writes[2]) ~= 'number' then
    return nil
  end
  return fields
end

-- The format in use: 1 to 999999999, written as digits alone; 0 for
-- anything else in the field, a format no build writes (so no instance
-- runs a script on it until an operator sets one).
local function fleet_format(text)
  if text and string.match(text, '^[1-9]%d?%d?%d?%d?%d?%d?%d?%d?$') then
    return tonumber(text)
  end
  return 0
end
