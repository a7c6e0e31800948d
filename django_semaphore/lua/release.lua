-- Give back the permits held by `token` and wake the waiters that now fit.
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
--
-- Reply: {released (1 if the lease was still held, else 0), used, limit}
local holders, info, state = KEYS[1], KEYS[2], KEYS[3]
local queue, alive, qweight, history = KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local token, base, wake_ttl = ARGV[1], ARGV[3], tonumber(ARGV[4])

local now = server_now_ms()
local score = redis.call('ZSCORE', holders, token)
local released = 0
if not score then
  redis.call('HINCRBY', state, 'refused', 1)
elseif tonumber(score) <= now then
  redis.call('HINCRBY', state, 'lost', 1)
else
  local weight = parse_info(redis.call('HGET', info, token))
  redis.call('ZREM', holders, token)
  redis.call('HDEL', info, token)
  redis.call('HINCRBY', state, 'used', -weight)
  redis.call('HINCRBY', state, 'released', 1)
  released = 1
end
reclaim_expired(holders, info, state, now)
reclaim_dead_waiters(queue, alive, qweight, base, now)
local limit = effective_limit(state, tonumber(ARGV[2]))
local used = used_permits(state)
wake_waiters(queue, base, limit - used, wake_ttl)
record_sample(state, history, now, queue, tonumber(ARGV[5]), tonumber(ARGV[6]))
expire_when_idle({holders, info, state, queue, alive, qweight}, holders, now, tonumber(ARGV[7]))
return {released, used, limit}
