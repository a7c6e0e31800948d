-- Add what one process counted since its last flush to a semaphore's totals and to its recent
-- activity (core/tally.py sends it from the background thread, once per flush interval; no acquire or
-- release runs it). Not one of the semaphore's own seven keys: its counters are per name, so a keyed
-- semaphore's partitions add up in one place.
--
-- KEYS[1] totals  HASH  field -> count since `since` (server ms, written by the first flush):
--                       "a|<result>|<detail>|<bucket>" attempts per duration bucket, "a|...|s" their
--                       summed durations (us); "h|<reason>|<bucket>", "h|<reason>|s", "h|<reason>|p"
--                       the same for permits that ended, and the permits (weights) they counted
-- KEYS[2] recent  HASH  "<slot>|<field>" -> count in that slot of the server's clock; "slot" the
--                       newest slot written. Fields: "c<i>" attempts of result i, "w<i>" acquired
--                       attempts' waits in bucket i, "h<i>" holds in bucket i
-- ARGV[1] slot length in ms
-- ARGV[2] slots kept for the counts (c<i>), ARGV[3] slots kept for the buckets (w<i>, h<i>)
-- ARGV[4] how many results there are (c0...), ARGV[5] how many buckets (w0..., h0...)
-- ARGV[6] n: field/increment pairs for KEYS[1] follow (ARGV[7] to ARGV[6 + 2n]); the rest are
--         field/increment pairs for the current slot of KEYS[2]
--
-- Reply: the slot written (server ms / slot length).
local slot_ms = int_arg(ARGV[1], 'slot', 1, MAX_MS)
local keep_counts = int_arg(ARGV[2], 'count slots kept', 1, 100000)
local keep_buckets = int_arg(ARGV[3], 'bucket slots kept', 1, 100000)
local results = int_arg(ARGV[4], 'results', 0, 100)
local buckets = int_arg(ARGV[5], 'buckets', 0, 100)
local n = int_arg(ARGV[6], 'totals', 0, 100000)
local totals, recent = KEYS[1], KEYS[2]

local now = server_now_ms()
local slot = math.floor(now / slot_ms)

for i = 7, 6 + 2 * n, 2 do
  int_arg(ARGV[i + 1], 'count', 0, 9007199254740991)
  redis.call('HINCRBY', totals, ARGV[i], ARGV[i + 1])
end
redis.call('HSETNX', totals, 'since', now)

-- Slots that left a window since the newest one written go, field by field; after an hour without a
-- flush the whole hash is older than every window.
local newest = tonumber(redis.call('HGET', recent, 'slot'))
if newest and slot - newest >= keep_counts then
  redis.call('DEL', recent)
elseif newest and newest < slot then
  local function forget(keep, prefix, count)
    for s = newest - keep + 1, slot - keep do
      local fields = {}
      for i = 0, count - 1 do
        fields[#fields + 1] = s .. '|' .. prefix .. i
      end
      if #fields > 0 then
        redis.call('HDEL', recent, unpack(fields))
      end
    end
  end
  forget(keep_counts, 'c', results)
  forget(keep_buckets, 'w', buckets)
  forget(keep_buckets, 'h', buckets)
end
for i = 7 + 2 * n, #ARGV, 2 do
  int_arg(ARGV[i + 1], 'count', 0, 9007199254740991)
  redis.call('HINCRBY', recent, slot .. '|' .. ARGV[i], ARGV[i + 1])
end
if not newest or newest < slot then
  redis.call('HSET', recent, 'slot', slot)
end
-- Nothing in it outlives its longest window: a semaphore nobody uses any more leaves nothing behind.
redis.call('PEXPIRE', recent, keep_counts * slot_ms)
return slot
