-- Take `weight` permits for `token`, or join / stay in the waiting line.
--
-- KEYS[1] holders ZSET, KEYS[2] info HASH, KEYS[3] state HASH,
-- KEYS[4] queue ZSET, KEYS[5] alive ZSET, KEYS[6] qweight HASH,
-- KEYS[7] history LIST
-- KEYS[8] the caller's own wake list (deleted once it leaves the line)
-- ARGV[1] token: the holder's 128-bit random id (or its identity digest)
-- ARGV[2] weight: permits asked for (>= 1)
-- ARGV[3] limit from settings (a runtime override in state wins)
-- ARGV[4] lease in ms: the holder's deadline is now + lease
-- ARGV[5] mode: 'try' answers at once; 'wait' joins (or stays in) the line
-- ARGV[6] waiter heartbeat ttl in ms: a waiter not heard from for this long
--         leaves the line
-- ARGV[7] holder metadata (JSON written by the client, stored verbatim)
-- ARGV[8] key base with the hash tag, to name other waiters' wake lists
-- ARGV[9] wake note ttl in ms
-- ARGV[10] history sample interval in ms (0: no history), ARGV[11] samples kept
-- ARGV[12] partition idle expiry in ms (0 for whole semaphores: no expiry)
--
-- Reply: {code, fence, used, limit, nearest_expiry_ms, waiting, position,
--         lease_deadline_ms, now_ms}; code 1 granted, 2 already held (lease
--         renewed), 3 queued, 0 full, -1 weight above the limit.
local holders, info, state = KEYS[1], KEYS[2], KEYS[3]
local queue, alive, qweight, history, own_wake = KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local token, weight = ARGV[1], tonumber(ARGV[2])
local lease_ms, mode = tonumber(ARGV[4]), ARGV[5]
local waiter_ttl, meta, base, wake_ttl = tonumber(ARGV[6]), ARGV[7], ARGV[8], tonumber(ARGV[9])

local now = server_now_ms()
-- Every answer goes through here, so a partition's keys never miss their expiry.
local function reply(...)
  expire_when_idle({holders, info, state, queue, alive, qweight}, holders, now, tonumber(ARGV[12]))
  return {...}
end
reclaim_expired(holders, info, state, now)
reclaim_dead_waiters(queue, alive, qweight, base, now)
local limit = effective_limit(state, tonumber(ARGV[3]))
local deadline = now + lease_ms

local function leave_line()
  redis.call('ZREM', queue, token)
  redis.call('ZREM', alive, token)
  redis.call('HDEL', qweight, token)
  redis.call('DEL', own_wake)
end

-- Acquiring again under the same identity renews the permit already held.
if redis.call('ZSCORE', holders, token) then
  redis.call('ZADD', holders, 'XX', deadline, token)
  local _, _, fence = parse_info(redis.call('HGET', info, token))
  return reply(2, fence, used_permits(state), limit, nearest_expiry_ms(holders, now),
               redis.call('ZCARD', queue), 0, deadline, now)
end

local used = used_permits(state)
if weight > limit then
  leave_line()
  return reply(-1, 0, used, limit, nearest_expiry_ms(holders, now), redis.call('ZCARD', queue), 0, 0, now)
end

-- First come, first served: a permit goes to this caller only if everyone
-- ahead of it in line fits in the free permits as well.
local free = limit - used
local rank = redis.call('ZRANK', queue, token)
local fits
if rank then
  fits = rank < free and weight_ahead(queue, qweight, rank + 1) <= free
else
  local waiting = redis.call('ZCARD', queue)
  fits = waiting < free and weight_ahead(queue, qweight, waiting) + weight <= free
end

if fits then
  if rank then
    leave_line()
  end
  local fence = redis.call('HINCRBY', state, 'fence', 1)
  redis.call('ZADD', holders, deadline, token)
  redis.call('HSET', info, token, weight .. '|' .. now .. '|' .. fence .. '|' .. meta)
  used = redis.call('HINCRBY', state, 'used', weight)
  redis.call('HINCRBY', state, 'acquired', 1)
  record_sample(state, history, now, queue, tonumber(ARGV[10]), tonumber(ARGV[11]))
  wake_waiters(queue, base, limit - used, wake_ttl)
  return reply(1, fence, used, limit, nearest_expiry_ms(holders, now), redis.call('ZCARD', queue), 0, deadline, now)
end

-- Waiters at the head may be asleep on their backstop timer: nudge them.
wake_waiters(queue, base, free, wake_ttl)
if mode == 'wait' then
  if not rank then
    local ticket = redis.call('HINCRBY', state, 'ticket', 1)
    redis.call('ZADD', queue, ticket, token)
    redis.call('HSET', qweight, token, weight)
    rank = redis.call('ZCARD', queue) - 1
  end
  redis.call('ZADD', alive, now + waiter_ttl, token)
  record_sample(state, history, now, queue, tonumber(ARGV[10]), tonumber(ARGV[11]))
  return reply(3, 0, used, limit, nearest_expiry_ms(holders, now), redis.call('ZCARD', queue), rank + 1, 0, now)
end
redis.call('HINCRBY', state, 'rejected', 1)
return reply(0, 0, used, limit, nearest_expiry_ms(holders, now), redis.call('ZCARD', queue), 0, 0, now)
