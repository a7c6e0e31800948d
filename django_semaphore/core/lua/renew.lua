-- Extend the lease of `token`. Never re-acquires: a lease that already ran out stays lost,
-- because someone else may hold the permit by now.
--
-- KEYS[1..7] the semaphore (see common.lua)
-- ARGV[1] the semaphore's configuration (see common.lua)
-- ARGV[2] token of the holder
-- ARGV[3] lease in ms: the new deadline is now + lease, never past the holder's max hold
--
-- Reply: {status, lease_deadline_ms, now_ms[, vanished]}; status 1 renewed, 2 renewed up to its max hold
-- (the lease ends for good at that deadline), 0 not held (released, lost or taken away). When not held,
-- vanished says what was found gone ("holders|N", "state|N": common.lua's `context`), or "all|0" when the
-- semaphore has no keys at all: a caller whose lease had not ended knows its keys vanished under it.
local cfg = read_config(ARGV[1])
local token = ARGV[2] or ''
local lease = int_arg(ARGV[3], 'lease', 1, MAX_MS)

local now, now_text = server_now_ms()
local score = redis.call('ZSCORE', K.holders, token)
if score and tonumber(score) > now then
  -- The common path: a live holder; only a partition's expiry may need the state hash.
  local info = parse_info(holder_record(token))
  local deadline = now + lease
  local status = 1
  if info.hold_until > 0 and deadline >= info.hold_until then
    deadline = info.hold_until
    status = 2
  end
  if deadline > tonumber(score) then
    add('ZADD', K.holders, 'XX', deadline, token)
  end
  outlive(deadline)
  commit({expires_at = redis.call('HGET', K.state, 'expires_at')}, cfg, now)
  return {status, deadline, now}
end

-- Not held: count why, and reclaim and serve the line like any other script.
local st = read_state()
local h = read_holders(now)
local line = read_line(now, cfg, st, nil)
local ctx = context(st, cfg, now, now_text, h, nil)
local nothing_left = h.empty and st.created
reclaim(st, h)
count(st, score and 'lost' or 'refused')
serve_line(ctx, line, cfg)
settle(ctx)
commit(st, cfg, now)
return {0, 0, now, ctx.vanished or (nothing_left and 'all|0') or nil}
