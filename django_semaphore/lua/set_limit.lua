-- Set or clear the runtime limit override; a raised limit serves the line.
--
-- KEYS[1] state HASH, KEYS[2] queue ZSET
-- ARGV[1] new limit, or '' to clear the override and use the settings again
-- ARGV[2] limit from settings
-- ARGV[3] key base with the hash tag, to name waiters' wake lists
-- ARGV[4] wake note ttl in ms
--
-- Reply: the limit now in force.
local state, queue = KEYS[1], KEYS[2]
if ARGV[1] == '' then
  redis.call('HDEL', state, 'limit')
else
  redis.call('HSET', state, 'limit', ARGV[1])
end
local limit = effective_limit(state, tonumber(ARGV[2]))
wake_waiters(queue, ARGV[3], limit - used_permits(state), tonumber(ARGV[4]))
return limit
