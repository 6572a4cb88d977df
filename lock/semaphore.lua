-- KEYS[1]=semaphore key (sorted set: permit token -> expiry, server ms).
-- ARGV[1]=mode; ARGV[2]=permit token.
--   'a' acquire: ARGV[3]=limit; ARGV[4]=ttl ms
--   'f' refresh: ARGV[3]=ttl ms
--   'r' release: ARGV[3]=channel; ARGV[4]='' to PUBLISH the release, 's' to
--                SPUBLISH it (sharded pub/sub: the message stays on the key's
--                shard), 'b' to send it with both (the client does not know
--                yet which the server has; each waiter listens in one).
--                The channel shares the key's cluster slot.
--
-- Every mode first drops the permits whose expiry has passed (the permits of
-- holders that died or stopped refreshing), so that an expired permit frees
-- its place without anyone releasing it. The key itself expires with its
-- latest permit.
--
-- Replies:
--   'a': {1, ttl ms} acquired; {0, ms} full: the earliest permit expires in
--        ms (at least 1), when a waiter should try again if no release
--        wakes it first.
--   'f': 1 refreshed; 0 not held (expired, or released).
--   'r': {1, err} released; {0, err} not held (expired, or released
--        already). err = '' or the PUBLISH refusal. A release that removed
--        a permit is published either way: a waiter may take its place.
--
-- TIME is nondeterministic: writing after it needs effects replication (the
-- only kind since Redis 7 and in Valkey; asked for where the server knows it).
if redis.replicate_commands then redis.replicate_commands() end

local mode, tok = ARGV[1], ARGV[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- keep makes the key live at least ttl ms from now: as long as its latest
-- permit.
local function keep(ttl)
  if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
end

if mode == 'r' then
  local s = redis.call('ZSCORE', KEYS[1], tok)
  if not s then return {0, ''} end
  redis.call('ZREM', KEYS[1], tok)
  local held = 0
  if tonumber(s) > now then held = 1 end
  local publish = {'PUBLISH'}
  if ARGV[4] == 's' then publish = {'SPUBLISH'} end
  if ARGV[4] == 'b' then publish = {'SPUBLISH', 'PUBLISH'} end
  -- pcall: a refused channel, an ACL without it, or a server without
  -- SPUBLISH must not undo the release; waiters then find it by their poll.
  local refused, sent = '', false
  for _, cmd in ipairs(publish) do
    local r = redis.pcall(cmd, ARGV[3], tok)
    if type(r) == 'table' and r.err then
      if refused == '' then refused = tostring(r.err) end
    else
      sent = true
    end
  end
  if sent then refused = '' end
  return {held, refused}
end

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)

if mode == 'f' then
  local ttl = tonumber(ARGV[3])
  if not redis.call('ZSCORE', KEYS[1], tok) then return 0 end
  redis.call('ZADD', KEYS[1], now + ttl, tok)
  keep(ttl)
  return 1
end

-- mode 'a'
local limit, ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
if redis.call('ZCARD', KEYS[1]) < limit then
  redis.call('ZADD', KEYS[1], now + ttl, tok)
  keep(ttl)
  return {1, ttl}
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, math.max(1, tonumber(first[2]) - now)}
