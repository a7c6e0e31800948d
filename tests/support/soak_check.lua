-- The soak test's referee (not part of the library): record one holder as
-- inside, forget holders whose lease has ended, and return the weight inside.
-- Atomic on the server, on the server's clock, so it cannot miscount a race.
--
-- KEYS[1] HASH of holders inside: token -> "weight|lease_deadline_ms"
-- ARGV[1] token of the holder entering
-- ARGV[2] its weight
-- ARGV[3] its lease deadline in ms (server clock, as the acquire returned it)
--
-- Reply: the total weight inside, this holder included.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. '|' .. ARGV[3])
local total = 0
local entries = redis.call('HGETALL', KEYS[1])
for i = 1, #entries, 2 do
  local weight, deadline = string.match(entries[i + 1], '^(%d+)|(%d+)$')
  if tonumber(deadline) <= now then
    redis.call('HDEL', KEYS[1], entries[i])
  else
    total = total + tonumber(weight)
  end
end
return total
