-- Record a partition of a keyed semaphore in its name's registry and, when the registry holds more
-- than the semaphore's cap, name the oldest entries for eviction. The new partition is always
-- recorded: the cap bounds what is kept, never who is served (evict_partition.lua deletes an idle
-- candidate's keys, settle_evictions.lua then drops its entry). The registry lives in the name's
-- slot, not the partition's, so this is a script of its own (run before the acquire, once per
-- partition per process per half idle period), not part of the acquire script.
--
-- KEYS[1] registry ZSET  partition hash -> when last recorded (ms, server clock)
-- KEYS[2] labels   HASH  partition hash -> key label (shortened)
-- ARGV[1] partition hash, ARGV[2] label
-- ARGV[3] forget after ms: entries not recorded for this long are dropped
--         (their partitions have expired long since); also the keys' expiry
-- ARGV[4] cap on partitions kept (0: none, and no candidates named)
-- ARGV[5] how many stale entries one call drops at most
-- ARGV[6] how many eviction candidates one call names at most
--
-- Reply: {known (1: the partition was in the registry already, 0: new), now_ms, wanted (entries
--         above the cap, at most ARGV[6]), then, when some are wanted, the oldest entries (this
--         partition excluded, at most ARGV[6], so that the caller can look past those in use): hash,
--         score}
local registry, labels = KEYS[1], KEYS[2]
local partition, label = ARGV[1], ARGV[2]
local forget_ms, cap, batch, most = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])

local now = server_now_ms()
local stale = redis.call('ZRANGEBYSCORE', registry, '-inf', now - forget_ms, 'LIMIT', 0, batch)
if #stale > 0 then
  redis.call('ZREM', registry, unpack(stale))
  redis.call('HDEL', labels, unpack(stale))
end
local known = redis.call('ZSCORE', registry, partition) and 1 or 0
redis.call('ZADD', registry, now, partition)
redis.call('HSET', labels, partition, label)
redis.call('PEXPIRE', registry, forget_ms)
redis.call('PEXPIRE', labels, forget_ms)
local wanted = cap > 0 and math.min(redis.call('ZCARD', registry) - cap, most) or 0
local reply = {known, now, math.max(wanted, 0)}
if wanted > 0 then
  -- One more than named: this partition, just scored `now`, is last unless entries share its score.
  local oldest = redis.call('ZRANGE', registry, 0, most, 'WITHSCORES')
  for i = 1, #oldest, 2 do
    if oldest[i] ~= partition and #reply < 3 + 2 * most then
      reply[#reply + 1] = oldest[i]
      reply[#reply + 1] = oldest[i + 1]
    end
  end
end
return reply
