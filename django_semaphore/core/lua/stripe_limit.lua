-- One stripe's step of a limit change of a striped semaphore (core/stripe_limits.py): every stripe is a
-- semaphore of its own, and a change reaches them one by one, those it lowers first, then those it raises,
-- so that the stripes' limits never add up to more than the old or the new limit while it is applied.
-- Each change has a generation (stripe_plan.lua, in the name's slot); a stripe keeps the last it applied
-- (`sgen` in its state hash) and ignores an older one, so two changes sent at once leave every stripe at
-- the later one's share, whatever their steps' order. What set_limit.lua does to a semaphore otherwise:
-- a raised limit serves the line, a lowered one takes no permit away, clearing gives an adaptive rule
-- back its own limit and a new window.
--
-- KEYS[1..7] the stripe (see common.lua)
-- ARGV[1] the stripe's configuration (see common.lua): its share of the limit in settings
-- ARGV[2] the change's generation, an integer >= 1
-- ARGV[3] 'lower': applied only where it does not raise this stripe's limit in force; 'raise': applied
-- ARGV[4] 'set' (ARGV[5] is this stripe's new limit, its share of the new one) or 'clear' (back to the
--         share in settings, or to this stripe's adaptive rule)
-- ARGV[5] the stripe's new limit for 'set', else ignored
--
-- Reply: {done, limit in force, generation applied}: done is 1 when applied now, 0 when left for the
--        other phase, -1 when the stripe applied a later generation already (nothing written then).
local cfg = read_config(ARGV[1])
local generation = int_arg(ARGV[2], 'generation', 1, 9007199254740991)
local phase, action = ARGV[3], ARGV[4]
if phase ~= 'lower' and phase ~= 'raise' then
  fail("phase must be 'lower' or 'raise'")
end
local value = 0
if action == 'set' then
  value = int_arg(ARGV[5], 'limit', 0, MAX_LIMIT)
elseif action ~= 'clear' then
  fail("action must be 'set' or 'clear'")
end

local now, now_text = server_now_ms()
local st, line, ctx = open_semaphore(cfg, now, now_text, nil)
local applied = tonumber(field(st, 'sgen')) or 0
if applied > generation then
  return {-1, ctx.limit, applied}
end
local new = value
if action == 'clear' then
  new = cfg.adaptive and adaptive_limit(st, cfg.adaptive) or cfg.limit
end
if phase == 'lower' and new > ctx.limit then
  return {0, ctx.limit, applied}
end
if action == 'clear' then
  if st.limit then
    drop('HDEL', K.state, 'limit')
    if cfg.adaptive then
      restart_window(ctx)
    end
  end
else
  set_state('limit', new)
end
ctx.limit = new
set_state('sgen', generation)
serve_line(ctx, line, cfg)
sample(ctx, cfg, line.waiting)
settle(ctx)
commit(st, cfg, now)
return {1, ctx.limit, generation}
