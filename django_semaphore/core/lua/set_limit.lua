-- Set, change or clear the runtime limit override; a raised limit serves the waiting line, a
-- lowered one takes no permit away (new grants wait until use falls below it), and 0 pauses the
-- semaphore: no new grants; holders finish, waiters wait. The override pins an adaptive limit;
-- clearing it gives the adaptive rule back its own limit and starts it a new window.
--
-- KEYS[1..7] the semaphore (see common.lua)
-- ARGV[1] the semaphore's configuration (see common.lua)
-- ARGV[2] 'set' (ARGV[3] is the new limit), 'add' (ARGV[3] is added to the limit in force, and
--         may be negative; the result stays within 0 and the maximum) or 'clear' (back to the
--         limit in settings)
-- ARGV[3] the number for 'set' and 'add'
--
-- Reply: the limit now in force.
local cfg = read_config(ARGV[1])
local op = ARGV[2]
local value = 0
if op == 'set' then
  value = int_arg(ARGV[3], 'limit', 0, MAX_LIMIT)
elseif op == 'add' then
  value = int_arg(ARGV[3], 'change', -MAX_LIMIT, MAX_LIMIT)
elseif op ~= 'clear' then
  fail("operation must be 'set', 'add' or 'clear'")
end

local now, now_text = server_now_ms()
local st, line, ctx = open_semaphore(cfg, now, now_text, nil)

if op == 'clear' then
  ctx.limit = cfg.adaptive and adaptive_limit(st, cfg.adaptive) or cfg.limit
  if st.limit then
    drop('HDEL', K.state, 'limit')
  end
  if cfg.adaptive then
    restart_window(ctx)
  end
else
  if op == 'set' then
    ctx.limit = value
  else
    ctx.limit = math.max(0, math.min(MAX_LIMIT, ctx.limit + value))
  end
  set_state('limit', ctx.limit)
end
serve_line(ctx, line, cfg)
sample(ctx, cfg, line.waiting)
settle(ctx)
commit(st, cfg, now)
return ctx.limit
