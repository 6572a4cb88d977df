-- KEYS[1]=key; ARGV[1]=expected value, or its SHA-1 hex when ARGV[2]=="sha1"
-- Deletes KEYS[1] only if it holds the expected value. Returns 1 or 0.
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
if ARGV[2] == 'sha1' then v = redis.sha1hex(v) end
if v ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])
