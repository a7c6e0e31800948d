-- Which partitions of a keyed semaphore the metrics report under their own key (core/series.py): at
-- most `places` of them, each the first a read found in use while a place was free, kept for as long
-- as reads keep finding it in use, and given up only when none has for `retire_ms`. Every other
-- partition is summed as "other". A place never goes to a newcomer while its holder is still in use,
-- so the keys a time-series database sees grow by at most `places` per retire period whatever
-- clients invent; and two scrapes at once cannot give out more places than there are. Run by the metrics'
-- reading (one per keyed semaphore per scrape or collection); not one of the semaphore's own keys:
-- these live in its name's slot, beside the partition registry.
--
-- KEYS[1] series  ZSET  partition hash -> when a read last found it in use (ms, server clock)
-- KEYS[2] labels  HASH  partition hash -> its key, as the registry recorded it (shortened)
-- ARGV[1] places: how many partitions keep a series of their own at most (1 to 10000)
-- ARGV[2] retire after ms: a partition no read found in use for this long gives its place up. The
--         keys expire a day after that, so a semaphore nobody scrapes any more leaves nothing behind,
--         while one whose scrapes paused (a Prometheus restarted) keeps its places for the partitions
--         still in use when they resume
-- ARGV[3], ARGV[4], ...: hash, key pairs of the partitions this read found in use (a holder or a
--         waiter), busiest first: those with a place are kept in it, the others take free places
--         in this order; at most 20000 pairs
--
-- Reply: the hashes of the partitions with a place after this read.
local series, labels = KEYS[1], KEYS[2]
local places = int_arg(ARGV[1], 'places', 1, 10000)
local retire_ms = int_arg(ARGV[2], 'retire', 1, MAX_MS)
if #ARGV % 2 ~= 0 or #ARGV > 2 + 2 * 20000 then
  fail('partitions in use come as at most 20000 hash, key pairs')
end

local now = server_now_ms()
local in_use = {}
for i = 3, #ARGV, 2 do
  in_use[ARGV[i]] = true
end

-- Who keeps a place: any partition found in use now, or within retire_ms. More than `places` only
-- after the setting was lowered: then those found in use now stay first, then the most recently.
local kept, leaving = {}, {}
local members = redis.call('ZRANGE', series, 0, -1, 'WITHSCORES')
for i = 1, #members, 2 do
  local partition = members[i]
  local seen = in_use[partition] and now or tonumber(members[i + 1])
  if now - seen > retire_ms then
    leaving[#leaving + 1] = partition
  else
    kept[#kept + 1] = {partition, seen}
  end
end
if #kept > places then
  table.sort(kept, function(a, b)
    local now_a, now_b = in_use[a[1]] or false, in_use[b[1]] or false
    if now_a ~= now_b then
      return now_a
    end
    if a[2] ~= b[2] then
      return a[2] > b[2]
    end
    return a[1] < b[1]
  end)
  for i = #kept, places + 1, -1 do
    leaving[#leaving + 1] = kept[i][1]
    kept[i] = nil
  end
end

local placed, scores, named = {}, {}, {}
for _, entry in ipairs(kept) do
  placed[#placed + 1] = entry[1]
  if in_use[entry[1]] then
    scores[#scores + 1] = now
    scores[#scores + 1] = entry[1]
  end
end
local has = {}
for _, partition in ipairs(placed) do
  has[partition] = true
end
for i = 3, #ARGV, 2 do
  if #placed >= places then
    break
  end
  if not has[ARGV[i]] then
    has[ARGV[i]] = true
    placed[#placed + 1] = ARGV[i]
    scores[#scores + 1] = now
    scores[#scores + 1] = ARGV[i]
    named[#named + 1] = ARGV[i]
    named[#named + 1] = ARGV[i + 1]
  end
end

-- Writes in common.lua's abort-safe order: additions, expiries, then removals (which may delete a key).
for first = 1, #scores, 2 * BATCH do
  redis.call('ZADD', series, unpack(scores, first, math.min(first + 2 * BATCH - 1, #scores)))
end
for first = 1, #named, 2 * BATCH do
  redis.call('HSET', labels, unpack(named, first, math.min(first + 2 * BATCH - 1, #named)))
end
local expire_ms = math.min(retire_ms + 86400000, MAX_MS)
redis.call('PEXPIRE', series, expire_ms)
redis.call('PEXPIRE', labels, expire_ms)
for first = 1, #leaving, BATCH do
  local last = math.min(first + BATCH - 1, #leaving)
  redis.call('ZREM', series, unpack(leaving, first, last))
  redis.call('HDEL', labels, unpack(leaving, first, last))
end
return placed
