-- An operator's force release of one holder, or of every holder a batch at a time; the line is served
-- with what comes free.
--
-- KEYS[1..7] the semaphore (see common.lua)
-- ARGV[1] the semaphore's configuration (see common.lua)
-- ARGV[2] 'one' (ARGV[3] is a holder's token) or 'all' (ARGV[3] and ARGV[4] say where a pass stands)
-- ARGV[3] one: the token to release (an empty or unknown token releases nothing);
--         all: the cursor of a pass over the holders ('0' begins one): this call releases the holders of
--         the pass's next step (one ZSCAN of FORCE_BATCH, or the whole set while Redis keeps it as one
--         small listpack: zset-max-listpack-entries), so releasing thousands of holders is many short
--         calls, none of which keeps the server from everyone else for long
-- ARGV[4] all: the last fence granted when the first pass began, '0' for the first call: only holders
--         granted by then (fences only grow) are released, so that the permits a step hands to the line
--         stay with the waiters, and a pass ends however many are granted meanwhile
--
-- Reply: {cursor, start, token...}: the pass's next cursor ('0': the pass is over; always '0' for one),
-- the start to send with the next step (the fence read by the first call), then the tokens released.
local FORCE_BATCH = 200
local cfg = read_config(ARGV[1])
local mode, target, start = ARGV[2], ARGV[3] or '', ARGV[4] or '0'
if mode ~= 'one' and mode ~= 'all' then
  fail('bad force release mode ' .. tostring(mode))
end
if mode == 'one' and target == '' then
  return {'0', '0'}
end
if mode == 'all' and not (string.match(target, '^%d+$') and string.match(start, '^%d+$')) then
  fail('bad force release step ' .. target .. ' ' .. start)
end

local now, now_text = server_now_ms()
local st, line, ctx = open_semaphore(cfg, now, now_text, nil)
if start == '0' then
  start = int_text(tonumber(ctx.fence) or 0)
end

local cursor, live = '0', {}
if mode == 'all' then
  local scanned = redis.call('ZSCAN', K.holders, target, 'COUNT', FORCE_BATCH)
  cursor = scanned[1]
  local found = scanned[2]
  for i = 1, #found, 2 do
    if tonumber(found[i + 1]) > now then
      live[#live + 1] = found[i]
    end
  end
else
  local score = redis.call('ZSCORE', K.holders, target)
  if score and tonumber(score) > now then
    live[1] = target
  end
end

local released, weight, granted_by = {cursor, start}, 0, tonumber(start)
for i, record in ipairs(records_of(live)) do
  local info = parse_info(record)
  if mode == 'one' or tonumber(info.fence) <= granted_by then
    drop_holder(live[i])
    released[#released + 1] = live[i]
    weight = weight + info.weight
  end
end
local count_released = #released - 2
if count_released > 0 then
  if redis.call('ZCARD', K.holders) == count_released + ctx.purged then
    ctx.used = 0  -- nobody left: whatever `used` said (a holder whose record was lost counts one)
  else
    ctx.used = math.max(ctx.used - weight, 0)
  end
  count(st, 'forced', count_released)
end
serve_line(ctx, line, cfg)
sample(ctx, cfg, line.waiting)
settle(ctx)
commit(st, cfg, now)
return released
