-- KEYS[1]=lock key; KEYS[2]=fence counter (same cluster slot); ARGV[1]=value; ARGV[2]=ttl in ms
-- Takes the lock and, in the same atomic step, draws the next fencing number:
-- max(counter + 1, the server's clock in microseconds since the epoch), which
-- it stores back in the counter. The clock term keeps numbers growing when the
-- counter is lost (a restart without persistence, eviction) or set back (a
-- replica promoted before it received the last increments), as long as the
-- clock of the server that draws the number is ahead of the numbers drawn
-- before; the counter term keeps them growing when the clock goes back.
-- Returns the number (>= 1), or 0 when the lock is held. A counter holding
-- anything but an integer below 2^53 (what Lua's numbers hold exactly) is an
-- error, and then nothing is written.
--
-- TIME is nondeterministic: writing after it needs effects replication, the
-- only kind since Redis 7 and in Valkey, the default in Redis 5 and 6, and
-- asked for below where the server still knows the call (a no-op there).
if redis.replicate_commands then redis.replicate_commands() end
-- Every command that can be refused (a key or command the ACL denies, a
-- counter that is not a number) runs before the first write, so that a
-- refusal leaves neither a lock nor a changed counter behind; the writes are
-- two SETs, with no INCR to be denied separately.
local cur = redis.call('GET', KEYS[2])
if cur and (not string.match(cur, '^%-?%d+$') or tonumber(cur) >= 9007199254740992) then
  return redis.error_reply('lock: fence counter ' .. KEYS[2] .. ' holds a value that is not an integer below 2^53')
end
local t = redis.call('TIME')
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0
end
-- Both terms are integers below 2^53, so exact in Lua's doubles, and are
-- written back as digits, never in a float's notation.
local n = tonumber(t[1]) * 1000000 + tonumber(t[2])
local digits = t[1] .. string.format('%06d', tonumber(t[2]))
if cur and tonumber(cur) >= n then
  n = tonumber(cur) + 1
  digits = string.format('%.0f', n)
end
redis.call('SET', KEYS[2], digits)
return n
