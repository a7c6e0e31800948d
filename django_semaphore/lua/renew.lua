-- Extend the lease of `token`. Never re-acquires: a lease that already ran
-- out stays lost, because someone else may hold the permit by now.
--
-- KEYS[1] holders ZSET, KEYS[2] info HASH, KEYS[3] state HASH
-- ARGV[1] token of the holder
-- ARGV[2] lease in ms: the new deadline is now + lease
-- ARGV[3] partition idle expiry in ms (0 for whole semaphores: no expiry)
--
-- Reply: {renewed (1/0), new lease deadline in ms (0 when not renewed), now_ms}
local holders, info, state = KEYS[1], KEYS[2], KEYS[3]
local token = ARGV[1]

local now = server_now_ms()
local score = redis.call('ZSCORE', holders, token)
if not score then
  redis.call('HINCRBY', state, 'refused', 1)
  return {0, 0, now}
end
if tonumber(score) <= now then
  reclaim_expired(holders, info, state, now)
  redis.call('HINCRBY', state, 'lost', 1)
  return {0, 0, now}
end
local deadline = now + tonumber(ARGV[2])
redis.call('ZADD', holders, 'XX', deadline, token)
expire_when_idle({holders, info, state}, holders, now, tonumber(ARGV[3]))
return {1, deadline, now}
