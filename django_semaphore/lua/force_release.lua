-- Operator's force release of one holder, or of every holder, then wake
-- the waiters that now fit.
--
-- KEYS[1] holders ZSET, KEYS[2] info HASH, KEYS[3] state HASH,
-- KEYS[4] queue ZSET, KEYS[5] alive ZSET, KEYS[6] qweight HASH,
-- KEYS[7] history LIST
-- ARGV[1] token to release, or '' for all holders
-- ARGV[2] limit from settings (a runtime override in state wins)
-- ARGV[3] key base with the hash tag, to name waiters' wake lists
-- ARGV[4] wake note ttl in ms
-- ARGV[5] history sample interval in ms (0: no history), ARGV[6] samples kept
-- ARGV[7] partition idle expiry in ms (0 for whole semaphores: no expiry)
--
-- Reply: the tokens that were released.
local holders, info, state = KEYS[1], KEYS[2], KEYS[3]
local queue, alive, qweight, history = KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local base, wake_ttl = ARGV[3], tonumber(ARGV[4])

local now = server_now_ms()
reclaim_expired(holders, info, state, now)
reclaim_dead_waiters(queue, alive, qweight, base, now)
local released = {}
if ARGV[1] == '' then
  released = redis.call('ZRANGE', holders, 0, -1)
  redis.call('DEL', holders, info)
  redis.call('HSET', state, 'used', 0)
elseif redis.call('ZSCORE', holders, ARGV[1]) then
  redis.call('HINCRBY', state, 'used', -drop_holder(holders, info, ARGV[1]))
  released = {ARGV[1]}
end
if #released > 0 then
  redis.call('HINCRBY', state, 'forced', #released)
end
local limit = effective_limit(state, tonumber(ARGV[2]))
wake_waiters(queue, base, limit - used_permits(state), wake_ttl)
record_sample(state, history, now, queue, tonumber(ARGV[5]), tonumber(ARGV[6]))
expire_when_idle({holders, info, state, queue, alive, qweight}, holders, now, tonumber(ARGV[7]))
return released
