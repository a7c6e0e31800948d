-- An operator's force release of one holder, or of every holder a batch at a time; the line is served
-- with what comes free.
--
-- KEYS[1..7] the semaphore (see common.lua)
-- ARGV[1] the semaphore's configuration (see common.lua)
-- ARGV[2] 'one' (ARGV[3] is a holder's token) or 'all' (ARGV[3] is a cursor of a pass over the holders)
-- ARGV[3] one: the token to release (an empty or unknown token releases nothing);
--         all: where the pass stands ('0' begins one): this call releases the live holders of the pass's
--         next step (one ZSCAN of FORCE_BATCH), so releasing thousands of holders is many short calls,
--         none of which keeps the server from everyone else for long. A holder present for the whole
--         pass is released by it (ZSCAN returns it at least once); one granted during the pass may be
--         released or not; the pass ends, however many come meanwhile.
--
-- Reply: {cursor, token...}: the pass's next cursor ('0': the pass is over; always '0' for one), then the
-- tokens released.
local FORCE_BATCH = 200
local cfg = read_config(ARGV[1])
local mode, target = ARGV[2], ARGV[3] or ''
if mode ~= 'one' and mode ~= 'all' then
  fail('bad force release mode ' .. tostring(mode))
end
if mode == 'one' and target == '' then
  return {'0'}
end
if mode == 'all' and not string.match(target, '^%d+$') then
  fail('bad force release cursor ' .. target)
end

local now, now_text = server_now_ms()
local st, line, ctx = open_semaphore(cfg, now, now_text, nil)

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

local released = {cursor}
if #live > 0 then
  local weight = weights_of(live)
  for _, holder in ipairs(live) do
    drop_holder(holder)
    released[#released + 1] = holder
  end
  ctx.used = math.max(ctx.used - weight, 0)
  count(st, 'forced', #live)
end
serve_line(ctx, line, cfg)
sample(ctx, cfg, line.waiting)
settle(ctx)
commit(st, cfg, now)
return released
