-- Helpers shared by every script: scripts.py prepends this file to each one
-- before loading it, so every operation stays a single EVALSHA.
--
-- Data model of one semaphore (all keys share one {hash tag}, so one slot):
--   holders  ZSET  token -> lease deadline (ms, server clock)
--   info     HASH  token -> "weight|acquired_ms|fence|metadata"
--   state    HASH  used (sum of held weights), fence (never reset), limit
--                  (runtime override), ticket (waiting-line counter) and the
--                  outcome counters (acquired, rejected, released, expired,
--                  lost, forced)
--   queue    ZSET  waiter token -> ticket number (first come, first served)
--   alive    ZSET  waiter token -> heartbeat deadline (ms, server clock)
--   qweight  HASH  waiter token -> "weight|lease_ms|metadata": its request, so
--                  that a release can grant it without waiting to be asked
--   history  LIST  "sampled_at_ms|peak_used|waiting" utilisation samples
--   <base>wake:<token>  LIST  one wake-up note per waiter (pushed on release)

local function server_now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function parse_info(value)
  if not value then
    return 1, 0, 0, ''
  end
  local w, acquired, fence, meta = string.match(value, '^(%d+)|(%d+)|(%d+)|(.*)$')
  return tonumber(w), tonumber(acquired), tonumber(fence), meta
end

-- Remove one holder; returns its weight and when it acquired (for the
-- caller's accounting of `used` and hold times).
local function drop_holder(holders, info, token)
  local weight, acquired = parse_info(redis.call('HGET', info, token))
  redis.call('ZREM', holders, token)
  redis.call('HDEL', info, token)
  return weight, acquired
end

-- Take a waiter out of the line (granted, gave up, or too heavy); returns 1
-- if it was in line. Its wake list is the caller's to keep or drop.
local function drop_waiter(queue, alive, qweight, token)
  local removed = redis.call('ZREM', queue, token)
  redis.call('ZREM', alive, token)
  redis.call('HDEL', qweight, token)
  return removed
end

local function effective_limit(state, configured)
  local override = redis.call('HGET', state, 'limit')
  if override then
    return tonumber(override)
  end
  return configured
end

local function used_permits(state)
  return tonumber(redis.call('HGET', state, 'used') or '0')
end

-- Reclaim every holder whose lease deadline has passed (crashed or stalled
-- holders): their weight goes back to the pool and they are counted.
-- Returns how many were reclaimed and the earliest remaining deadline (nil
-- when nobody holds a permit), which callers reuse for Retry-After.
local function reclaim_expired(holders, info, state, now)
  local first = redis.call('ZRANGE', holders, 0, 0, 'WITHSCORES')
  if #first == 0 or tonumber(first[2]) > now then
    return 0, tonumber(first[2])
  end
  local expired = redis.call('ZRANGEBYSCORE', holders, '-inf', now)
  local freed = 0
  for _, token in ipairs(expired) do
    local weight = parse_info(redis.call('HGET', info, token))
    freed = freed + weight
    redis.call('HDEL', info, token)
  end
  redis.call('ZREMRANGEBYSCORE', holders, '-inf', now)
  local used = redis.call('HINCRBY', state, 'used', -freed)
  if used < 0 then
    -- Only reachable if keys were edited by hand; never leave capacity negative.
    redis.call('HSET', state, 'used', 0)
  end
  redis.call('HINCRBY', state, 'expired', #expired)
  first = redis.call('ZRANGE', holders, 0, 0, 'WITHSCORES')
  return #expired, tonumber(first[2])
end

-- Drop waiters that stopped heartbeating (their process died or gave up
-- without saying so), so they never block the line for long.
local function reclaim_dead_waiters(queue, alive, qweight, base, now)
  local dead = redis.call('ZRANGEBYSCORE', alive, '-inf', now)
  for _, token in ipairs(dead) do
    redis.call('ZREM', queue, token)
    redis.call('HDEL', qweight, token)
    redis.call('DEL', base .. 'wake:' .. token)
  end
  if #dead > 0 then
    redis.call('ZREMRANGEBYSCORE', alive, '-inf', now)
  end
end

-- Push a wake-up note to the waiters at the head of the line that the free
-- permits could serve. Weights are >= 1, so at most `free` of them can fit;
-- a woken waiter that still does not fit simply waits again.
local function wake_waiters(queue, base, free, wake_ttl_ms)
  if free <= 0 then
    return
  end
  local heads = redis.call('ZRANGE', queue, 0, free - 1)
  for _, token in ipairs(heads) do
    local wake = base .. 'wake:' .. token
    if redis.call('EXISTS', wake) == 0 then
      redis.call('RPUSH', wake, '1')
      redis.call('PEXPIRE', wake, wake_ttl_ms)
    end
  end
end

local function parse_waiter(value)
  if not value then
    return 1, 0, ''
  end
  local weight, lease_ms, meta = string.match(value, '^(%d+)|(%d+)|(.*)$')
  return tonumber(weight) or 1, tonumber(lease_ms) or 0, meta or ''
end

-- Sum of the weights of the first `count` waiters in line.
local function weight_ahead(queue, qweight, count)
  if count <= 0 then
    return 0
  end
  local tokens = redis.call('ZRANGE', queue, 0, count - 1)
  local total = 0
  for _, token in ipairs(tokens) do
    total = total + parse_waiter(redis.call('HGET', qweight, token))
  end
  return total
end

-- A fence for a new grant: one above the last, or, for a semaphore without
-- one (new, or its keys were lost with a restart or expired while idle),
-- the server clock in microseconds, so fences keep increasing across such
-- gaps as long as the clock does and grants stay under a thousand per
-- millisecond. Returned with its text: Lua would print a number this large
-- as 1.7e+15.
local function next_fence(last_raw, now)
  local fence = (tonumber(last_raw) or now * 1000) + 1
  return fence, string.format('%d', fence)
end

-- Hand free permits straight to the waiters at the head of the line, in
-- order, as far as they fit (a head that does not fit stops the line: first
-- come, first served). Each gets a grant note "G|fence|deadline" on its own
-- wake list, so it holds the permit without another round trip. The lease
-- runs `claim_ms` at first: a waiter that died since its last heartbeat
-- holds the permit only that long; a live one renews at once.
-- Returns the new use, the last fence and how many were granted.
local function grant_heads(holders, info, queue, alive, qweight, base, limit, used, fence_raw, now, claim_ms,
                           wake_ttl_ms)
  local free = limit - used
  if free <= 0 then
    return used, fence_raw, 0
  end
  local granted = 0
  local fence_text = fence_raw
  for _, token in ipairs(redis.call('ZRANGE', queue, 0, free - 1)) do
    local weight, lease_ms, meta = parse_waiter(redis.call('HGET', qweight, token))
    if weight > limit - used then
      break
    end
    local fence
    fence, fence_text = next_fence(fence_text, now)
    local deadline = now + math.min(lease_ms, claim_ms)
    redis.call('ZADD', holders, deadline, token)
    redis.call('HSET', info, token, weight .. '|' .. now .. '|' .. fence_text .. '|' .. meta)
    drop_waiter(queue, alive, qweight, token)
    local wake = base .. 'wake:' .. token
    redis.call('DEL', wake)
    redis.call('RPUSH', wake, 'G|' .. fence_text .. '|' .. string.format('%d', deadline))
    redis.call('PEXPIRE', wake, wake_ttl_ms)
    used = used + weight
    granted = granted + 1
  end
  return used, fence_text, granted
end

-- Utilisation history for the dashboard: at most one sample per `every_ms`,
-- carrying the peak use since the previous sample (so short bursts show),
-- capped at `keep` samples. every_ms = 0 turns it off (partitions).
-- `peak_raw` and `sampled_raw` are the state fields as the caller read them;
-- the fields to write are appended to `fields`, so the caller writes the
-- state hash once.
local function add_sample(fields, history, now, used, waiting, peak_raw, sampled_raw, every_ms, keep)
  if every_ms <= 0 then
    return
  end
  local peak = math.max(tonumber(peak_raw) or 0, used)
  if now - (tonumber(sampled_raw) or 0) >= every_ms then
    redis.call('RPUSH', history, now .. '|' .. peak .. '|' .. waiting)
    redis.call('LTRIM', history, -keep, -1)
    table.insert(fields, 'sampled_at')
    table.insert(fields, now)
    table.insert(fields, 'peak')
    table.insert(fields, used)
  elseif peak ~= tonumber(peak_raw) then
    table.insert(fields, 'peak')
    table.insert(fields, peak)
  end
end

-- add_sample for scripts that have not read the state hash themselves.
local function record_sample(state, history, now, queue, every_ms, keep)
  if every_ms <= 0 then
    return
  end
  local marks = redis.call('HMGET', state, 'used', 'peak', 'sampled_at')
  local fields = {}
  add_sample(fields, history, now, tonumber(marks[1]) or 0, redis.call('ZCARD', queue), marks[2], marks[3],
             every_ms, keep)
  if #fields > 0 then
    redis.call('HSET', state, unpack(fields))
  end
end

-- When a permit is likely to come free: the sooner of the earliest lease end
-- and the typical hold (a moving average of recent holds). With renewal on,
-- leases run far ahead of the work, so the lease alone would tell clients to
-- come back much later than they need to.
local function expected_free_ms(earliest_deadline, now, hold_avg_raw)
  if not earliest_deadline then
    return 0
  end
  local expected = math.max(earliest_deadline - now, 0)
  local hold_avg = tonumber(hold_avg_raw) or 0
  if hold_avg > 0 and hold_avg < expected then
    expected = hold_avg
  end
  return expected
end

-- A partition of a keyed semaphore (one per user, per IP...) must not keep
-- its keys once nobody uses it: scripts that change it set its keys to expire
-- `idle_ms` after its last lease ends (0, for whole semaphores, keeps them).
-- Every key gets the same expiry, never before the last lease ends, so the
-- counters cannot vanish while a permit is held; the fence restarts from 1
-- after the keys are gone.
local function expire_when_idle(keys, holders, now, idle_ms)
  if idle_ms <= 0 then
    return
  end
  local last = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')
  local ttl = idle_ms
  if #last > 0 then
    ttl = ttl + math.max(tonumber(last[2]) - now, 0)
  end
  for _, key in ipairs(keys) do
    redis.call('PEXPIRE', key, ttl)
  end
end
