-- Everything an operator needs about one semaphore, after reclaiming expired
-- holders and dead waiters so the numbers are current.
--
-- KEYS[1] holders ZSET, KEYS[2] info HASH, KEYS[3] state HASH,
-- KEYS[4] queue ZSET, KEYS[5] alive ZSET, KEYS[6] qweight HASH,
-- KEYS[7] history LIST
-- ARGV[1] limit from settings (a runtime override in state wins)
-- ARGV[2] how many holders to list at most (those expiring first)
-- ARGV[3] key base with the hash tag, to name waiters' wake lists
-- ARGV[4] wake note ttl in ms
-- ARGV[5] history sample interval in ms (0: no history), ARGV[6] samples kept
-- ARGV[7] 1 to include the utilisation history, else 0
-- ARGV[8] partition idle expiry in ms (0 for whole semaphores: no expiry)
--
-- Reply: {now_ms, limit, state as flat HGETALL, holder count, waiting,
--         {token, lease_deadline_ms, info, ...}, history samples}
local holders, info, state = KEYS[1], KEYS[2], KEYS[3]
local queue, alive, qweight, history = KEYS[4], KEYS[5], KEYS[6], KEYS[7]

local now = server_now_ms()
local reclaimed = reclaim_expired(holders, info, state, now)
reclaim_dead_waiters(queue, alive, qweight, ARGV[3], now)
local limit = effective_limit(state, tonumber(ARGV[1]))
if reclaimed > 0 then
  wake_waiters(queue, ARGV[3], limit - used_permits(state), tonumber(ARGV[4]))
end
local listed = {}
local rows = redis.call('ZRANGE', holders, 0, tonumber(ARGV[2]) - 1, 'WITHSCORES')
for i = 1, #rows, 2 do
  listed[#listed + 1] = rows[i]
  listed[#listed + 1] = rows[i + 1]
  listed[#listed + 1] = redis.call('HGET', info, rows[i]) or ''
end
record_sample(state, history, now, queue, tonumber(ARGV[5]), tonumber(ARGV[6]))
local samples = {}
if ARGV[7] == '1' then
  samples = redis.call('LRANGE', history, 0, -1)
end
expire_when_idle({holders, info, state, queue, alive, qweight}, holders, now, tonumber(ARGV[8]))
return {now, limit, redis.call('HGETALL', state), redis.call('ZCARD', holders),
        redis.call('ZCARD', queue), listed, samples}
