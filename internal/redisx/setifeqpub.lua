-- KEYS[1]=key; ARGV[1]=expected value, or its SHA-1 hex when ARGV[2]=="sha1"; ARGV[3]=new value; ARGV[4]=ttl in ms; ARGV[5]=channel; ARGV[6]=message; ARGV[7]="spublish" or "publish"
-- Replaces KEYS[1] only if it holds the expected value and, only then,
-- publishes the message. Returns {0} when it did not write, {1, n} when it
-- wrote and published to n subscribers, {1, error text} when it wrote and
-- the publish failed
-- (the ACL refused the command or the channel, say): the write stands, as
-- a script's writes are never undone, so the publish runs in a pcall and
-- comes after the write.
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' then return {0} end
if ARGV[2] == 'sha1' then v = redis.sha1hex(v) end
if v ~= ARGV[1] then return {0} end
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
local r = redis.pcall(ARGV[7], ARGV[5], ARGV[6])
if type(r) == 'table' and r.err then return {1, r.err} end
return {1, r}
