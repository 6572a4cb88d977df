-- A tag record's soft epoch drawn anew (cache/tags.go): KEYS[1] is the
-- record, ARGV[1] the new soft epoch (8 bytes). The record is an entry
-- whose last 8 bytes are the soft epoch; its hard epoch and expiry stay.
-- A key that holds no record of that length is left as it is.
local v = redis.call('GET', KEYS[1])
if not v or string.len(v) ~= 39 or string.byte(v, 1) ~= 245 then
  return 0
end
redis.call('SET', KEYS[1], string.sub(v, 1, 31) .. ARGV[1], 'KEEPTTL')
return 1
