-- KEYS[1]=lock key; ARGV[1]=token
-- Deletes the lock only if it still holds our token. Returns 1 or 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then
	return redis.call('DEL', KEYS[1])
end
return 0
