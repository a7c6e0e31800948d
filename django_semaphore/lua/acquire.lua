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
--         lease_deadline_ms, now_ms, expected_free_ms}; code 1 granted,
--         2 already held (lease renewed), 3 queued, 0 full, -1 weight above
--         the limit. nearest_expiry_ms is when the earliest lease ends (the
--         waiter's backstop timer); expected_free_ms also weighs the typical
--         hold (Retry-After).
local holders, info, state = KEYS[1], KEYS[2], KEYS[3]
local queue, alive, qweight, history, own_wake = KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local token, weight = ARGV[1], tonumber(ARGV[2])
local lease_ms, mode = tonumber(ARGV[4]), ARGV[5]
local waiter_ttl, meta, base, wake_ttl = tonumber(ARGV[6]), ARGV[7], ARGV[8], tonumber(ARGV[9])
local every_ms, keep = tonumber(ARGV[10]), tonumber(ARGV[11])

local now = server_now_ms()
local deadline = now + lease_ms
local _, earliest = reclaim_expired(holders, info, state, now)
local waiting = redis.call('ZCARD', queue)
if waiting > 0 then
  reclaim_dead_waiters(queue, alive, qweight, base, now)
  waiting = redis.call('ZCARD', queue)
end
-- One read of the state hash serves the whole script; it is written once too.
local st = redis.call('HMGET', state, 'limit', 'used', 'fence', 'acquired', 'rejected', 'peak', 'sampled_at',
                      'hold_avg')
local limit = tonumber(st[1]) or tonumber(ARGV[3])
local used = tonumber(st[2]) or 0

-- Every answer goes through here, so a partition's keys never miss their expiry.
local function reply(code, fence, position, lease_deadline)
  expire_when_idle({holders, info, state, queue, alive, qweight}, holders, now, tonumber(ARGV[12]))
  local nearest = earliest and math.max(earliest - now, 0) or 0
  return {code, fence, used, limit, nearest, waiting, position, lease_deadline, now,
          expected_free_ms(earliest, now, st[8])}
end

local function leave_line()
  drop_waiter(queue, alive, qweight, token)
  redis.call('DEL', own_wake)
end

-- Acquiring again under the same identity renews the permit already held
-- (and a retried call whose first reply was lost cannot count twice).
if redis.call('ZSCORE', holders, token) then
  redis.call('ZADD', holders, 'XX', deadline, token)
  local _, _, fence = parse_info(redis.call('HGET', info, token))
  -- A waiter handed a permit just as it asked again: its note is moot.
  redis.call('DEL', own_wake)
  earliest = tonumber(redis.call('ZRANGE', holders, 0, 0, 'WITHSCORES')[2])
  return reply(2, fence, 0, deadline)
end

if weight > limit then
  leave_line()
  waiting = redis.call('ZCARD', queue)
  return reply(-1, 0, 0, 0)
end

-- First come, first served: a permit goes to this caller only if everyone
-- ahead of it in line fits in the free permits as well.
local free = limit - used
local rank = false
if waiting > 0 then
  rank = redis.call('ZRANK', queue, token)
end
local fits
if rank then
  fits = rank < free and weight_ahead(queue, qweight, rank + 1) <= free
else
  fits = waiting < free and weight_ahead(queue, qweight, waiting) + weight <= free
end

if fits then
  if rank then
    leave_line()
    waiting = waiting - 1
  end
  local fence, fence_text = next_fence(st[3], now)
  redis.call('ZADD', holders, deadline, token)
  redis.call('HSET', info, token, weight .. '|' .. now .. '|' .. fence_text .. '|' .. meta)
  used = used + weight
  local fields = {'fence', fence_text, 'used', used, 'acquired', (tonumber(st[4]) or 0) + 1}
  add_sample(fields, history, now, used, waiting, st[6], st[7], every_ms, keep)
  redis.call('HSET', state, unpack(fields))
  if waiting > 0 then
    wake_waiters(queue, base, limit - used, wake_ttl)
  end
  if not earliest or deadline < earliest then
    earliest = deadline
  end
  return reply(1, fence, 0, deadline)
end

-- Waiters at the head may be asleep on their backstop timer: nudge them.
if waiting > 0 then
  wake_waiters(queue, base, free, wake_ttl)
end
local fields = {}
local position = 0
if mode == 'wait' then
  if not rank then
    local ticket = redis.call('HINCRBY', state, 'ticket', 1)
    redis.call('ZADD', queue, ticket, token)
    redis.call('HSET', qweight, token, weight .. '|' .. lease_ms .. '|' .. meta)
    rank = waiting
    waiting = waiting + 1
  end
  redis.call('ZADD', alive, now + waiter_ttl, token)
  position = rank + 1
else
  fields = {'rejected', (tonumber(st[5]) or 0) + 1}
end
add_sample(fields, history, now, used, waiting, st[6], st[7], every_ms, keep)
if #fields > 0 then
  redis.call('HSET', state, unpack(fields))
end
return reply(mode == 'wait' and 3 or 0, 0, position, 0)
