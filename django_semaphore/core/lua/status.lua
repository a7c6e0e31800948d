-- Everything an operator needs about one semaphore, after reclaiming expired holders and dead
-- waiters (and serving the line with what they freed), with `used` recounted from the holders,
-- so the numbers are current.
--
-- KEYS[1..7] the semaphore (see common.lua)
-- ARGV[1] the semaphore's configuration (see common.lua)
-- ARGV[2] how many holders to list at most (those whose lease ends first)
-- ARGV[3] '1' to include the utilisation history, else '0'
--
-- Reply: {now_ms, limit, state as flat field/value pairs, holder count, waiting,
--         {token, lease_deadline_ms, info, ...}, history samples[, vanished]}: vanished when it found
--         keys gone under held permits (common.lua's `context`)
local cfg = read_config(ARGV[1])
local max_holders = int_arg(ARGV[2], 'holders listed', 0, 10000000)

local now, now_text = server_now_ms()
local st, line, ctx = open_semaphore(cfg, now, now_text, nil, STATE_FIELDS)
recount(ctx)
local holder_count = 0
if ctx.earliest then
  holder_count = redis.call('ZCOUNT', K.holders, '(' .. now, '+inf')
end

local listed = {}
if max_holders > 0 and holder_count > 0 then
  local rows = redis.call('ZRANGEBYSCORE', K.holders, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, max_holders)
  local tokens = {}
  for i = 1, #rows, 2 do
    tokens[#tokens + 1] = rows[i]
  end
  for i, record in ipairs(records_of(tokens)) do
    listed[#listed + 1] = rows[i * 2 - 1]
    listed[#listed + 1] = rows[i * 2]
    listed[#listed + 1] = record or ''
  end
end
local samples = {}
if ARGV[3] == '1' and cfg.every > 0 then
  samples = redis.call('LRANGE', K.history, 0, -1)
end

serve_line(ctx, line, cfg)
local taken = sample(ctx, cfg, line.waiting)
if taken and ARGV[3] == '1' then
  samples[#samples + 1] = taken
  while #samples > cfg.keep do
    table.remove(samples, 1)
  end
end
settle(ctx)
commit(st, cfg, now)

local flat = {}
for _, field in ipairs(STATE_FIELDS) do
  local value = plan.state[field] or st[field]
  if value then
    flat[#flat + 1] = field
    flat[#flat + 1] = value
  end
end
return {now, ctx.limit, flat, holder_count + ctx.granted, line.waiting, listed, samples, ctx.vanished}
