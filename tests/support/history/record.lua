-- One event of a history, recorded on the probe server (never the server under test): its time on
-- this server's clock, its place in one total order (the log's), and the weight inside each
-- semaphore, counted in the same step, so an overlap shows exactly as the probe ordered the events.
--
-- KEYS[1] log     LIST  the events, "<microseconds> <weight inside after it> <event as JSON>", in order
-- KEYS[2] inside  HASH  semaphore -> weight inside now; "<semaphore>|max" -> the most ever inside
-- KEYS[3] open    HASH  "<semaphore>|<process>" -> the weight that process has inside now
-- ARGV[1] the event's semaphore ('' for none)
-- ARGV[2] the weight it moves: +w for an entry, -w for an exit, 0 for anything else
-- ARGV[3] the process it comes from (or, for an event saying a process died, the dead one)
-- ARGV[4] the event, JSON (stored as it is)
-- ARGV[5...] for a dead process: the semaphores it may have been inside, emptied of its weight
local now = redis.call('TIME')
local us = now[1] .. string.sub('00000' .. now[2], -6)  -- text: a Lua number would print as 1.7e+15
local sem, moved, process = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local inside = 0
for i = 5, #ARGV do
  local left = tonumber(redis.call('HGET', KEYS[3], ARGV[i] .. '|' .. process) or '0')
  if left ~= 0 then
    redis.call('HINCRBY', KEYS[2], ARGV[i], -left)
    redis.call('HDEL', KEYS[3], ARGV[i] .. '|' .. process)
  end
end
if sem ~= '' then
  if moved ~= 0 then
    inside = redis.call('HINCRBY', KEYS[2], sem, moved)
    redis.call('HINCRBY', KEYS[3], sem .. '|' .. process, moved)
    if inside > tonumber(redis.call('HGET', KEYS[2], sem .. '|max') or '0') then
      redis.call('HSET', KEYS[2], sem .. '|max', inside)
    end
  else
    inside = tonumber(redis.call('HGET', KEYS[2], sem) or '0')
  end
end
redis.call('RPUSH', KEYS[1], us .. ' ' .. inside .. ' ' .. ARGV[4])
return tonumber(us)
