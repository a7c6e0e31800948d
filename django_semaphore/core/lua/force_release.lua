-- An operator's force release of one holder, or of every holder; the line is served with what
-- comes free.
--
-- KEYS[1..7] the semaphore (see common.lua)
-- ARGV[1] the semaphore's configuration (see common.lua)
-- ARGV[2] token to release ('' with ARGV[3] = '1')
-- ARGV[3] '1' to release every holder; otherwise only ARGV[2], and an empty or unknown token
--         releases nothing
--
-- Reply: the tokens that were released.
local cfg = read_config(ARGV[1])
local everyone = ARGV[3] == '1'
local token = ARGV[2] or ''
if not everyone and token == '' then
  return {}
end

local now, now_text = server_now_ms()
local st, line, ctx = open_semaphore(cfg, now, now_text, nil)

local released = {}
if everyone then
  released = redis.call('ZRANGEBYSCORE', K.holders, '(' .. now, '+inf')
  for _, holder in ipairs(released) do
    drop_holder(holder)
  end
  ctx.used = 0
else
  local score = redis.call('ZSCORE', K.holders, token)
  if score and tonumber(score) > now then
    local info = parse_info(holder_record(token))
    drop_holder(token)
    ctx.used = math.max(ctx.used - info.weight, 0)
    released = {token}
  end
end
if #released > 0 then
  count(st, 'forced', #released)
end
serve_line(ctx, line, cfg)
sample(ctx, cfg, line.waiting)
settle(ctx)
commit(st, cfg, now)
return released
