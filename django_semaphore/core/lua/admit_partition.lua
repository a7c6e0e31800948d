-- Record a partition of a keyed semaphore in its name's registry, unless the
-- semaphore keeps its cap of partitions already and this one would be new.
-- The registry lives in the name's slot, not the partition's, so this is a
-- script of its own (run before the acquire, once per partition per process
-- per half idle period), not part of the acquire script.
--
-- KEYS[1] registry ZSET  partition hash -> when last recorded (ms, server clock)
-- KEYS[2] labels   HASH  partition hash -> key label (shortened)
-- ARGV[1] partition hash, ARGV[2] label
-- ARGV[3] forget after ms: entries not recorded for this long are dropped
--         (their partitions have expired long since); also the keys' expiry
-- ARGV[4] cap on partitions kept (0: none)
-- ARGV[5] how many stale entries one call drops at most
--
-- Reply: 1 recorded, 0 refused (at the cap, and new)
local registry, labels = KEYS[1], KEYS[2]
local partition, label = ARGV[1], ARGV[2]
local forget_ms, cap, batch = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])

local now, now_text = server_now_ms()
local stale = redis.call('ZRANGEBYSCORE', registry, '-inf', now - forget_ms, 'LIMIT', 0, batch)
if #stale > 0 then
  redis.call('ZREM', registry, unpack(stale))
  redis.call('HDEL', labels, unpack(stale))
end
if cap > 0 and not redis.call('ZSCORE', registry, partition) and redis.call('ZCARD', registry) >= cap then
  return 0
end
redis.call('ZADD', registry, now, partition)
redis.call('HSET', labels, partition, label)
redis.call('PEXPIRE', registry, forget_ms)
redis.call('PEXPIRE', labels, forget_ms)
return 1
