-- KEYS[1]=key; ARGV[1]=expected value, or its SHA-1 hex when ARGV[2]=="sha1"; ARGV[3]=new value; ARGV[4]=ttl in ms, or "keepttl" to keep the key's
-- Replaces KEYS[1] only if it holds the expected value. Returns 1 or 0.
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' then return 0 end
if ARGV[2] == 'sha1' then v = redis.sha1hex(v) end
if v ~= ARGV[1] then return 0 end
if ARGV[4] == 'keepttl' then
  redis.call('SET', KEYS[1], ARGV[3], 'KEEPTTL')
else
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
end
return 1
