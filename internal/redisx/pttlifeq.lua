-- KEYS[1]=key; ARGV[1]=expected value, or its SHA-1 hex when ARGV[2]=="sha1"
-- Returns the PTTL of KEYS[1] if it holds the expected value, else -3.
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' then return -3 end
if ARGV[2] == 'sha1' then v = redis.sha1hex(v) end
if v ~= ARGV[1] then return -3 end
return redis.call('PTTL', KEYS[1])
