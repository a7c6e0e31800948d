-- Leave the waiting line (the caller's wait ran out), and wake whoever was
-- stuck behind it. A permit handed to the caller as it gave up goes back.
--
-- KEYS[1] queue ZSET, KEYS[2] alive ZSET, KEYS[3] qweight HASH,
-- KEYS[4] state HASH, KEYS[5] the caller's own wake list,
-- KEYS[6] holders ZSET, KEYS[7] info HASH
-- ARGV[1] token of the waiter
-- ARGV[2] limit from settings (a runtime override in state wins)
-- ARGV[3] key base with the hash tag, to name waiters' wake lists
-- ARGV[4] wake note ttl in ms
--
-- Reply: 1 if the waiter was still in line, else 0.
local queue, alive, qweight, state = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local holders, info = KEYS[6], KEYS[7]
local token = ARGV[1]

local removed = drop_waiter(queue, alive, qweight, token)
redis.call('DEL', KEYS[5])
if redis.call('ZSCORE', holders, token) then
  redis.call('HINCRBY', state, 'used', -drop_holder(holders, info, token))
end
redis.call('HINCRBY', state, 'rejected', 1)
local limit = effective_limit(state, tonumber(ARGV[2]))
wake_waiters(queue, ARGV[3], limit - used_permits(state), tonumber(ARGV[4]))
return removed
