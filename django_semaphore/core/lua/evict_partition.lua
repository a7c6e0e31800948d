-- Delete an idle partition's keys, so that a registry at its cap makes room for a new partition
-- without keeping the old one's memory. Idle: no live holder, no live waiter, and no limit override
-- (an operator's pause or cap on one key must not be undone by someone sending many new keys). A
-- partition evicted and used again starts afresh, as one that expired does: its next fence is seeded
-- from the server clock, so fences keep increasing.
--
-- KEYS[1..7] the partition (see common.lua)
-- ARGV[1] the semaphore's configuration (see common.lua; unused here, sent as to every script)
--
-- Reply: 1 evicted (its keys deleted), 0 busy (kept), -1 absent (it had no keys: expired, or its
--        first acquire has not run yet)
local now = server_now_ms()
if redis.call('EXISTS', K.state, K.holders, K.queue) == 0 then
  return -1
end
local after = '(' .. int_text(now)
if redis.call('ZCOUNT', K.holders, after, '+inf') > 0
    or redis.call('ZCOUNT', K.alive, after, '+inf') > 0
    or redis.call('HEXISTS', K.state, 'limit') == 1 then
  return 0
end
redis.call('DEL', K.holders, K.info, K.state, K.queue, K.alive, K.qweight, K.history)
return 1
