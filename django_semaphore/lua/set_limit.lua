-- Set or clear the runtime limit override; a raised limit serves the line.
--
-- KEYS[1] state HASH, KEYS[2] queue ZSET, KEYS[3] holders ZSET (read only,
--         to time a partition's expiry)
-- ARGV[1] new limit, or '' to clear the override and use the settings again
-- ARGV[2] limit from settings
-- ARGV[3] key base with the hash tag, to name waiters' wake lists
-- ARGV[4] wake note ttl in ms
-- ARGV[5] partition idle expiry in ms (0 for whole semaphores: no expiry);
--         an override of an idle partition goes with its other keys
--
-- Reply: the limit now in force.
local state, queue, holders = KEYS[1], KEYS[2], KEYS[3]
if ARGV[1] == '' then
  redis.call('HDEL', state, 'limit')
else
  redis.call('HSET', state, 'limit', ARGV[1])
end
local limit = effective_limit(state, tonumber(ARGV[2]))
wake_waiters(queue, ARGV[3], limit - used_permits(state), tonumber(ARGV[4]))
expire_when_idle({state, queue}, holders, server_now_ms(), tonumber(ARGV[5]))
return limit
