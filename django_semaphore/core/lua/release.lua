-- Give back the permits held by `token` and serve the waiting line with them.
-- Idempotent: releasing twice, or after the lease ran out, returns 0.
--
-- KEYS[1..7] the semaphore (see common.lua)
-- ARGV[1] the semaphore's configuration (see common.lua)
-- ARGV[2] token of the holder
-- ARGV[3] nonce, or '': only a grant made for the call that carried this nonce goes back (the
--         clean-up of an acquire whose reply never came, which must not take a permit another
--         call holds under the same identity)
-- ARGV[4] fence, or '': only the grant with this fence goes back (a release retried after its
--         reply was lost, which must not take a later grant under the same identity)
-- With either, the caller is unsure what the token holds: nothing is counted as refused or lost.
-- The adaptive rule decides on a release with its fence (a retry whose reply is read, and signalled),
-- and a retry that finds its first run made the last change reports that change again; a clean-up
-- with a nonce (an acquire's, whose caller does not read the reply) decides nothing.
--
-- Reply: 1 if the lease was still held (and is given back now), else 0; or, when this release
-- ended an adaptive window and the rule moved the limit (adaptive.lua), {released, old_limit,
-- new_limit, reason}, so that exactly one process (this one) reports the change; or, when it found
-- keys gone under held permits (common.lua's `context`, or "all|0": the token held nothing and the
-- semaphore has no keys at all), {released, old_limit, new_limit, reason, vanished}, the change's
-- fields 0, 0, '' when there was none.
local cfg = read_config(ARGV[1])
local token = ARGV[2] or ''
local nonce = ARGV[3] or ''
local fence = ARGV[4] or ''
local unsure = nonce ~= '' or fence ~= ''

local now, now_text = server_now_ms()
local st, line, ctx = open_semaphore(cfg, now, now_text, nil)
local score = redis.call('ZSCORE', K.holders, token)
local info = score and parse_info(holder_record(token))
local nothing_left = not score and ctx.holders_empty and st.created

local released = 0
if not score then
  if not unsure then
    count(st, 'refused')
  end
elseif tonumber(score) <= now then
  -- Its lease ran out before this release: reclaimed above.
  if not unsure then
    count(st, 'lost')
  end
elseif (nonce == '' or info.nonce == nonce) and (fence == '' or info.fence == fence) then
  drop_holder(token)
  ctx.used = math.max(ctx.used - info.weight, 0)
  -- Moving average of hold times (1/8 weight per hold), for Retry-After.
  local held_for = math.max(now - info.acquired, 0)
  local hold_avg = tonumber(st.hold_avg) or held_for
  set_state('hold_avg', math.floor(hold_avg + (held_for - hold_avg) / 8))
  if cfg.room then
    room_time(st, 'vi', held_for)  -- a waiting room's visit, ended by the site
  end
  released = 1
  if cfg.adaptive then
    record_hold(st, held_for)
  end
end
local change = nil
if cfg.adaptive and nonce == '' then
  -- Before serving the line: a raised limit serves it at once.
  local decider = info and (token .. '|' .. info.fence) or ''
  if fence ~= '' then
    change = change_made_by(st, token .. '|' .. fence)
  end
  if not change then
    ctx.decider = decider
    change = adapt(ctx, cfg)
  end
end
serve_line(ctx, line, cfg)
sample(ctx, cfg, line.waiting)
settle(ctx)
commit(st, cfg, now)
local vanished = ctx.vanished or (nothing_left and 'all|0') or nil
if vanished then
  return {released, change and change[1] or 0, change and change[2] or 0, change and change[3] or '', vanished}
end
if change then
  return {released, change[1], change[2], change[3]}
end
return released
