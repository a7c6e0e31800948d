-- After evict_partition.lua ran on the candidates admit_partition.lua named: drop the entries of
-- those evicted, and of those absent for longer than an admission takes (expired partitions), and
-- move the busy ones to the back so the next admission looks past them. An entry recorded again
-- meanwhile (its score changed: another process is using the partition) is left as it is.
--
-- KEYS[1] registry ZSET, KEYS[2] labels HASH (see admit_partition.lua)
-- ARGV[1] ms an entry without keys may be an admission whose acquire has not run yet (kept that long)
-- ARGV[2...] triples: partition hash, its score as admit_partition.lua read it, evict_partition.lua's
--            reply (1 evicted, 0 busy, -1 absent)
--
-- Reply: how many entries were dropped
local registry, labels = KEYS[1], KEYS[2]
local in_flight = tonumber(ARGV[1])
local now = server_now_ms()
local dropped = 0
for i = 2, #ARGV - 2, 3 do
  local partition, read, outcome = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local score = redis.call('ZSCORE', registry, partition)
  if score and tonumber(score) == tonumber(read) then
    if outcome == 1 or (outcome == -1 and now - tonumber(read) > in_flight) then
      redis.call('ZREM', registry, partition)
      redis.call('HDEL', labels, partition)
      dropped = dropped + 1
    elseif outcome == 0 then
      redis.call('ZADD', registry, now, partition)
    end
  end
end
return dropped
