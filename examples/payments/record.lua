-- KEYS[1]=order state (hash); KEYS[2]=ledger (list); KEYS[3]=highest fence seen for the order
-- ARGV[1]=fence; ARGV[2]="1" to check fences, "0" to ignore them;
-- ARGV[3]=charged and ARGV[4]=refunded after this operation (cents); ARGV[5]=ledger entry
-- Records one operation on an order unless (with the check on) its fence is
-- below the highest this store has seen for the order. Equal fences are
-- accepted: one lock holder may write more than once.
-- Returns {1, fence} when recorded, {0, highest} when rejected.
local fence = tonumber(ARGV[1])
local highest = tonumber(redis.call('GET', KEYS[3]) or '0')
if ARGV[2] == '1' and fence < highest then
  return {0, highest}
end
if fence > highest then
  redis.call('SET', KEYS[3], fence)
end
redis.call('HSET', KEYS[1], 'charged', ARGV[3], 'refunded', ARGV[4], 'fence', fence)
redis.call('RPUSH', KEYS[2], ARGV[5])
return {1, fence}
