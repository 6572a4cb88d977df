-- KEYS[1]=lock key; KEYS[2]=fence counter (same cluster slot); ARGV[1]=value; ARGV[2]=ttl in ms
-- Takes the lock and, in the same atomic step, draws the next fencing number.
-- Returns the number (>= 1), or 0 when the lock is held.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0
