-- Give back the permits held by `token` and hand them to the waiters at the
-- head of the line that now fit.
-- Idempotent: releasing twice, or after the lease ran out, returns 0.
--
-- KEYS[1] holders ZSET, KEYS[2] info HASH, KEYS[3] state HASH,
-- KEYS[4] queue ZSET, KEYS[5] alive ZSET, KEYS[6] qweight HASH,
-- KEYS[7] history LIST
-- ARGV[1] token of the holder
-- ARGV[2] limit from settings (a runtime override in state wins)
-- ARGV[3] key base with the hash tag, to name waiters' wake lists
-- ARGV[4] wake note ttl in ms
-- ARGV[5] history sample interval in ms (0: no history), ARGV[6] samples kept
-- ARGV[7] partition idle expiry in ms (0 for whole semaphores: no expiry)
-- ARGV[8] '1' when the caller only may hold the token (an acquire cut off
--         before its reply): an unknown token is then not counted as refused
-- ARGV[9] claim in ms: how long a permit handed to a waiter lives before the
--         waiter renews it (the waiter may have died since its heartbeat)
--
-- Reply: {released (1 if the lease was still held, else 0), used, limit}
local holders, info, state = KEYS[1], KEYS[2], KEYS[3]
local queue, alive, qweight, history = KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local token, base, wake_ttl = ARGV[1], ARGV[3], tonumber(ARGV[4])

local now = server_now_ms()
local score = redis.call('ZSCORE', holders, token)
reclaim_expired(holders, info, state, now)
local st = redis.call('HMGET', state, 'limit', 'used', 'released', 'refused', 'lost', 'peak', 'sampled_at',
                      'hold_avg', 'fence', 'acquired')
local limit = tonumber(st[1]) or tonumber(ARGV[2])
local used = tonumber(st[2]) or 0
local released = 0
local fields
if not score then
  fields = ARGV[8] == '1' and {} or {'refused', (tonumber(st[4]) or 0) + 1}
elseif tonumber(score) <= now then
  -- Its lease ran out before this release: reclaim_expired took it back.
  fields = {'lost', (tonumber(st[5]) or 0) + 1}
else
  local weight, acquired = drop_holder(holders, info, token)
  used = math.max(used - weight, 0)
  -- Moving average of hold times (1/8 weight per hold), for Retry-After.
  local held = math.max(now - acquired, 0)
  local hold_avg = tonumber(st[8]) or held
  hold_avg = math.floor(hold_avg + (held - hold_avg) / 8)
  fields = {'used', used, 'released', (tonumber(st[3]) or 0) + 1, 'hold_avg', hold_avg}
  released = 1
end
local waiting = redis.call('ZCARD', queue)
if waiting > 0 then
  reclaim_dead_waiters(queue, alive, qweight, base, now)
  local fence_text, granted
  used, fence_text, granted = grant_heads(holders, info, queue, alive, qweight, base, limit, used, st[9], now,
                                          tonumber(ARGV[9]), wake_ttl)
  if granted > 0 then
    for _, field in ipairs({'used', used, 'fence', fence_text, 'acquired', (tonumber(st[10]) or 0) + granted}) do
      table.insert(fields, field)
    end
  end
  waiting = redis.call('ZCARD', queue)
end
add_sample(fields, history, now, used, waiting, st[6], st[7], tonumber(ARGV[5]), tonumber(ARGV[6]))
if #fields > 0 then
  redis.call('HSET', state, unpack(fields))
end
expire_when_idle({holders, info, state, queue, alive, qweight}, holders, now, tonumber(ARGV[7]))
return {released, used, limit}
