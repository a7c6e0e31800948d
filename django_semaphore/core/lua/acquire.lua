-- Take `weight` permits for `token`, or join / stay in the waiting line.
--
-- KEYS[1..7] the semaphore (see common.lua); KEYS[8] the caller's own wake list (where a
--   clean-up that overtook this call left its tombstone, see cancel.lua)
-- ARGV[1] the semaphore's configuration (see common.lua)
-- ARGV[2] the request, nine fields separated by spaces (one argument: cheaper to send than nine):
--   token: the caller's 128-bit random id, or its identity digest
--   weight: permits asked for (an integer >= 1)
--   lease in ms: a new holder's deadline is now + lease (never past its max hold)
--   mode: 'try' answers at once; 'wait' joins (or stays in) the line
--   claim in ms: two of the caller's own waiter TTLs (common.lua's `waiter_ttl` halves it): how long
--     it keeps its ticket after a missed heartbeat; a permit a release hands it while it waits lives
--     one TTL until it renews (it may have died since its last heartbeat)
--   max hold in ms (0: none): no renewal extends the lease past acquired + max hold
--   nonce: this call's mark on its grant, so a clean-up gives back only what it may hold
--   not after, server ms (0: none): Redis running the call later than this means its caller has
--     given up on it (a hung server replaying what it buffered): refused, nothing written; so is
--     a call whose clean-up ran first (its tombstone on KEYS[8]), whatever the clocks say
--   grant before, server ms (0: none): the caller's wait ends then; run later (a slow server), the
--     call grants nothing, leaves the line and answers "full"
-- ARGV[3] holder metadata (JSON written by the client, stored verbatim)
--
-- Reply: {code, fence, lease_deadline_ms, used, limit, waiting, now_ms, fresh} when the caller got a
--         permit (the fast paths answer their grants with the same eight fields in one text, split by
--         replies.py's acquire_fields), else {code, fence, lease_deadline_ms, used, limit, waiting, now_ms, position,
--         nearest_expiry_ms, expected_free_ms, vanished, fresh} (also for a permit when keys were found
--         gone: vanished is common.lua's `context` report of keys gone under held permits, '' when none;
--         fresh is 1 when this call found the partition without keys, as a new, evicted or expired one is); code 1
--         granted, 2 already held (lease renewed), 3 queued, 0 full, -1 weight above the limit,
--         -2 too late (not after), -3 this token holds or waits with another weight.
--         nearest_expiry_ms is when the earliest lease ends (the waiter's backstop timer);
--         expected_free_ms also weighs the typical hold (Retry-After).
local cfg = read_config(ARGV[1])
local token, weight_text, lease, mode, claim, hold, nonce, not_after, grant_before =
  string.match(ARGV[2] or '', '^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S*) (%S+) (%S+)$')
if not token then
  fail('bad request argument ' .. tostring(ARGV[2]))
end
token = token_arg(token, 'token')
local weight = int_arg(weight_text, 'weight', 1, MAX_LIMIT)
lease = int_arg(lease, 'lease', 1, MAX_MS)
if mode ~= 'try' and mode ~= 'wait' then
  fail("mode must be 'try' or 'wait'")
end
claim = int_arg(claim, 'claim', 1, MAX_MS)
hold = int_arg(hold, 'max hold', 0, MAX_MS)
if #nonce > 64 or string.find(nonce, '|', 1, true) then
  fail('nonce must be at most 64 bytes without "|"')
end
not_after = int_arg(not_after, 'not after', 0, 9007199254740991)
grant_before = int_arg(grant_before, 'grant before', 0, 9007199254740991)
local meta = ARGV[3] or ''

local now, now_text = server_now_ms()
if (not_after > 0 and now > not_after) or (nonce ~= '' and has_note(K.own_wake, 'C|' .. nonce)) then
  return {-2, 0, 0, 0, 0, 0, now, 0, 0, 0}
end
local st, line, ctx = open_semaphore(cfg, now, now_text, token)

local function reply(code, fence, deadline, position)
  settle(ctx)
  commit(st, cfg, now)
  local fresh = st.created and 1 or 0
  if (code == 1 or code == 2) and not ctx.vanished then
    return {code, fence, deadline, ctx.used, ctx.limit, line.waiting, now, fresh}
  end
  local nearest = ctx.earliest and math.max(ctx.earliest - now, 0) or 0
  return {code, fence, deadline, ctx.used, ctx.limit, line.waiting, now, position, nearest, expected_free_ms(ctx, cfg),
          ctx.vanished or '', fresh}
end

-- Acquiring again under the same identity renews the permit already held (and a retried call
-- whose first reply was lost cannot count twice).
local held = redis.call('ZSCORE', K.holders, token)
if held and tonumber(held) > now then
  local info = parse_info(holder_record(token))
  if info.weight ~= weight then
    return reply(-3, 0, 0, 0)
  end
  local deadline = renew_held(token, info, tonumber(held), now, lease)
  outlive(deadline)
  return reply(2, tonumber(info.fence), deadline, 0)
end

if grant_before > 0 and now > grant_before then
  -- The caller's wait is over: nothing may be granted to it any more.
  if line.raw > 0 and redis.call('ZSCORE', K.queue, token) then
    leave_line(line, token)
    serve_line(ctx, line, cfg)
  end
  return reply(0, 0, 0, 0)
end

local rank = nil
if line.raw > 0 then
  rank = redis.call('ZRANK', K.queue, token)
end
if rank then
  local queued = parse_waiter(redis.call('HGET', K.qweight, token))
  if queued and queued.weight ~= weight then
    return reply(-3, 0, 0, 0)
  end
end

local function leave()
  if rank then
    leave_line(line, token)
  end
end

if ctx.limit > 0 and weight > ctx.limit then
  -- It could never be granted: it leaves the line, and whoever it held up is served.
  leave()
  ctx.caller = nil
  serve_line(ctx, line, cfg)
  return reply(-1, 0, 0, 0)
end

-- A caller about to be turned away is where a `used` too high would show: recount it (at most once
-- a second) before deciding.
if weight > ctx.limit - ctx.used then
  audit(ctx)
end

-- Fair: permits go to the line in order, and this caller only when its turn comes (or, new, when
-- everyone already waiting was served). Not fair: whoever asks while a permit is free gets it.
local fits
if cfg.fair then
  local its_turn = serve_line(ctx, line, cfg)
  if rank then
    fits = its_turn
  else
    fits = line.waiting == 0 and weight <= ctx.limit - ctx.used
  end
else
  fits = weight <= ctx.limit - ctx.used
end

if fits then
  if rank then
    -- A waiter granted its turn leaves no note behind (a wake-up for the lease it waited on, its own).
    delete(K.own_wake)
  end
  leave()
  local fence, deadline = grant(ctx, token, weight, lease, hold, nonce, meta, weight_text)
  -- Permits left over go on to the rest of the line.
  ctx.caller = nil
  serve_line(ctx, line, cfg)
  sample(ctx, cfg, line.waiting)
  return reply(1, fence, deadline, 0)
end

if not cfg.fair then
  -- Permits too few for this caller may still serve smaller requests asleep in line.
  serve_line(ctx, line, cfg)
end
local position = 0
local code = 0
if mode == 'wait' then
  code = 3
  if rank then
    position = rank + 1
  else
    -- A waiter that missed its heartbeat (starved of CPU, say) but comes back within the grace
    -- period keeps its ticket, and so its place; a newcomer takes the next one.
    local lapsed = parse_waiter(redis.call('HGET', K.qweight, token))
    local ticket
    if lapsed and lapsed.weight == weight then
      ticket = lapsed.ticket
      position = redis.call('ZCOUNT', K.queue, '-inf', '(' .. ticket) + 1
    else
      ticket = next_ticket(st)
      position = line.waiting + 1
    end
    join_line(line, now, token, ticket)
    add('HSET', K.qweight, token, weight .. '|' .. lease .. '|' .. claim .. '|' .. hold .. '|' .. ticket .. '|'
        .. nonce .. '|' .. meta)
    -- A note left from an earlier wait under this token must not wake this one.
    delete(K.own_wake)
    line.waiting = line.waiting + 1
  end
  add('ZADD', K.alive, now + cfg.waiter_ttl, token)
  -- Its place (and its ticket, for a grace period should it lapse) must outlive its heartbeat.
  outlive(now + cfg.waiter_ttl * (LAPSED_GRACE_TTLS + 1))
else
  leave()
end
sample(ctx, cfg, line.waiting)
return reply(code, 0, 0, position)
