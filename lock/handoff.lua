-- KEYS[1]=lock key; KEYS[2]=wait queue (sorted set: token -> arrival, server µs);
-- KEYS[3]=waiter entries (hash: token -> entry); KEYS[4]=fence counter. All four
-- share the lock key's cluster slot.
-- ARGV[1]=mode, followed by 's' when the hand-off is published with SPUBLISH
-- (sharded pub/sub, on a Redis Cluster: the message stays on the key's shard)
-- rather than PUBLISH, or by 'b' when it is published with both (the client
-- does not know yet which the server has; each waiter listens in one);
-- ARGV[2]=channel the hand-off is published on.
--   'r' release:  ARGV[3]=expected value, or its SHA-1 hex when ARGV[4]=='sha1'
--   'w' wait:     ARGV[3]=value; ARGV[4]=token; ARGV[5]=ttl ms; ARGV[6]='1' if fenced;
--                 ARGV[7]=entry life ms (how long the entry lives unless refreshed)
--   'l' leave:    ARGV[3]=value; ARGV[4]=token
-- An entry is "<deadline ms> <ttl ms> <0|1 fenced> <value>".
--
-- Hand-off: when the lock is released (or found free by a waiter's poll) and a
-- live waiter is queued, the lock is not deleted but set to the first live
-- waiter's value, expiring when that waiter's entry would (a dead waiter holds
-- it no longer than its entry would have lived), with a fencing number drawn
-- if the waiter asked for one; the waiter's token is published on the channel.
-- The waiter's next call in mode 'w' finds its value, extends the lock to its
-- full ttl and learns its fencing number. A newcomer's SET NX fails meanwhile.
--
-- Replies:
--   'r': 0 not held; 1 deleted (nobody live waited); {2, err} handed off,
--        err = '' or the PUBLISH refusal
--   'w': {0, err} queued (err: refusal of a PUBLISH this call made handing the
--        free lock to the waiter ahead); {1, fence} taken free; {2, fence} it
--        had been handed to this waiter. fence is 0 unless fenced.
--   'l': 0 left; 1 the lock had been handed to this waiter, now deleted;
--        {2, err} handed on to the next waiter.
-- A fence counter holding anything but an integer below 2^53 fails a fenced
-- 'w' call before anything is written; a waiter queued with fencing is then
-- skipped by hand-offs (its entry dropped) and learns of it by its next call.
--
-- TIME is nondeterministic: writing after it needs effects replication (the
-- only kind since Redis 7 and in Valkey; asked for where the server knows it).
if redis.replicate_commands then redis.replicate_commands() end

local mode = string.sub(ARGV[1], 1, 1)
local publish = {'PUBLISH'}
if string.sub(ARGV[1], 2, 2) == 's' then publish = {'SPUBLISH'} end
if string.sub(ARGV[1], 2, 2) == 'b' then publish = {'SPUBLISH', 'PUBLISH'} end

-- announce publishes tok on the channel with each command of publish and
-- returns '', or the first refusal when none of them went out (pcall: a
-- refused channel, an ACL without it, or a server without SPUBLISH, must not
-- undo the hand-off; the waiter then learns of it by its poll).
local function announce(tok)
  local refused, sent = '', false
  for _, cmd in ipairs(publish) do
    local r = redis.pcall(cmd, ARGV[2], tok)
    if type(r) == 'table' and r.err then
      if refused == '' then refused = tostring(r.err) end
    else
      sent = true
    end
  end
  if sent then return '' end
  return refused
end

-- fenceOK returns the counter (false when missing), or nil when it holds
-- something that is not an integer below 2^53.
local function fenceOK()
  local cur = redis.call('GET', KEYS[4])
  if cur and (not string.match(cur, '^%-?%d+$') or tonumber(cur) >= 9007199254740992) then
    return nil
  end
  return cur or false
end

-- draw stores and returns the next fencing number, as obtain_fenced.lua does.
local function draw(cur, t)
  local n = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local digits = t[1] .. string.format('%06d', tonumber(t[2]))
  if cur and tonumber(cur) >= n then
    n = tonumber(cur) + 1
    digits = string.format('%.0f', n)
  end
  redis.call('SET', KEYS[4], digits)
  return n
end

local function drop(tok)
  redis.call('ZREM', KEYS[2], tok)
  redis.call('HDEL', KEYS[3], tok)
end

-- handoff gives the free lock to the first live waiter. It returns that
-- waiter's token and the PUBLISH refusal ('' if none), or nil when nobody
-- live waits (the lock is then left as it was).
local function handoff(t)
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  while true do
    local head = redis.call('ZRANGE', KEYS[2], 0, 0)
    if #head == 0 then return nil end
    local tok = head[1]
    local e = redis.call('HGET', KEYS[3], tok)
    local deadline, ttl, fenced, value
    if e then
      deadline, ttl, fenced, value = string.match(e, '^(%d+) (%d+) ([01]) (.*)$')
    end
    local cur = false
    if fenced == '1' then cur = fenceOK() end
    if deadline and tonumber(deadline) - now >= 1 and cur ~= nil then
      local claim = math.min(tonumber(ttl), tonumber(deadline) - now)
      redis.call('SET', KEYS[1], value, 'PX', claim)
      if fenced == '1' then draw(cur, t) end
      drop(tok)
      return tok, announce(tok)
    end
    drop(tok) -- expired (the waiter died or gave up unheard), or unusable
  end
end

if mode == 'r' then
  local v = redis.call('GET', KEYS[1])
  if not v then return 0 end
  if ARGV[4] == 'sha1' then v = redis.sha1hex(v) end
  if v ~= ARGV[3] then return 0 end
  -- Nobody queued: the one extra read over a compare-and-delete.
  if redis.call('EXISTS', KEYS[2]) == 0 then
    redis.call('DEL', KEYS[1])
    return 1
  end
  local tok, err = handoff(redis.call('TIME'))
  if tok then return {2, err} end
  redis.call('DEL', KEYS[1])
  return 1
end

if mode == 'l' then
  drop(ARGV[4])
  if redis.call('GET', KEYS[1]) ~= ARGV[3] then return 0 end
  local tok, err = handoff(redis.call('TIME'))
  if tok then return {2, err} end
  redis.call('DEL', KEYS[1])
  return 1
end

-- mode 'w'
local value, tok, ttl, fenced, life = ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[6] == '1', tonumber(ARGV[7])
local cur = false
if fenced then
  cur = fenceOK()
  if cur == nil then
    return redis.error_reply('lock: fence counter ' .. KEYS[4] .. ' holds a value that is not an integer below 2^53')
  end
end
local held = redis.call('GET', KEYS[1])
if held == value then
  -- Handed to this waiter: hold it for the full ttl from now.
  redis.call('PEXPIRE', KEYS[1], ttl)
  drop(tok)
  local n = 0
  if fenced then n = tonumber(redis.call('GET', KEYS[4]) or '0') end
  return {2, n}
end
local t = redis.call('TIME')
local err = ''
if not held then
  -- Free (expired, or deleted by a release that did not hand off): the
  -- first live waiter gets it, this one if it is first or nobody waits.
  local to
  to, err = handoff(t)
  if not to or to == tok then
    if to then
      redis.call('PEXPIRE', KEYS[1], ttl)
    else
      redis.call('SET', KEYS[1], value, 'PX', ttl)
      if fenced then draw(cur, t) end
      drop(tok)
    end
    local n = 0
    if fenced then n = tonumber(redis.call('GET', KEYS[4]) or '0') end
    return {1, n}
  end
end
-- Held by another: join the queue (keeping the first arrival) or refresh
-- the entry, and keep both keys alive as long as the entry.
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[2], 'NX', tonumber(t[1]) * 1000000 + tonumber(t[2]), tok)
redis.call('HSET', KEYS[3], tok, (now + life) .. ' ' .. ttl .. ' ' .. (fenced and '1' or '0') .. ' ' .. value)
for i = 2, 3 do
  if redis.call('PTTL', KEYS[i]) < life then redis.call('PEXPIRE', KEYS[i], life) end
end
return {0, err}
