-- A waiting room (a semaphore whose configuration ends with " room", see common.lua): one visitor's
-- request, and the operators' side (its figures, letting the next visitors in, queueing every new one).
-- A visitor holds one permit for its whole visit and renews it with each request; one who finds the room
-- full waits in the semaphore's line, asking again every few seconds, and is let in only when fewer than
-- (limit - inside) visitors are ahead of it. Position is a rank in the line (ZRANK), never a scan.
--
-- KEYS[1..7] the semaphore (see common.lua)
-- KEYS[8] room HASH  admission samples, one per SAMPLE_MS at most in SLOTS slots (s0..s12 =
--         "sampled_at_ms|admitted|walked_in": the state's counters then: visitors let in, and those of them
--         let in without waiting), since (ms: when the room first counted), pace (ms: the room's latest change
--         of pace, when its line formed or its limit changed) with p (the counters then, as a sample) and
--         pace_limit (the limit then), and full_since (ms: when the line last went from empty to not; 0
--         while empty); kept for good, like a whole semaphore's state
-- KEYS[9] client ZSET   (a visit from a known client address only) the places the visitor's client address
--         holds: token -> when the place ends (ms: its visit's deadline inside, its abandon time in line); a
--         place that ended is dropped by the client's next call; the key expires with its last place
-- KEYS[10] client new STRING  (with KEYS[9]) the client's bucket of new places, "tokens|at_ms": it fills at
--         <per_minute> a minute up to <per_minute>, and each new place takes one; expires a minute after
-- ARGV[1] the semaphore's configuration (see common.lua); a room's, or the call is refused
-- ARGV[2] what to do, with its fields separated by spaces:
--         'visit <token> <lease_ms> <hold_ms> <renew> <places> <per_minute>': one request of the visitor
--           <token> (the identity its signed ticket carries): inside, its visit lasts until now + lease_ms
--           (never past admitted + hold_ms: the room's session; 0: no bound) when <renew> is 1 (a request the
--           view answers), and is left as it is when 0 (a poll the room answers); let in, its visit starts;
--           else it keeps (or takes, at the back) a place in line, which it loses when it asks nothing for
--           the abandon time. A new place (the visitor holds none) is refused when its client address
--           (KEYS[9]) holds <places> already, or took <per_minute> new places in the last minute (0: no
--           bound; without KEYS[9] there is none). Then, for the launch mode: <shuffled>, the place (1 to
--           2^40) the caller's keyed hash of the ticket gives it, taken by a newcomer before the room's opening
--           (the configuration's: the pre-queue, shuffled so, nobody let in) or in a random-order room
--           (<random> 1); <prequeue> (ms, 0: none): before it the visitor gets no place (code 6); <proof>:
--           '0' when the room asks a proof of work and the request carries none its caller could verify
--           (web/room_proof.py): a newcomer then gets no place (code 7, a challenge), '1' or '-' otherwise
--         'figures': the room's figures only (serving the line with whatever ended, as status does)
--         'let_in <n>': the next n visitors in line are let in, whatever the limit (an operator's choice)
--         'queue_all <0|1>': 1: every new visitor waits in line, even when there is room; 0: back to normal
-- ARGV[3] holder metadata for a visit (JSON written by the client, stored verbatim), else ''
--
-- Reply: {code, fence, lease_deadline_ms, used, limit, waiting, now_ms, position, window_admitted,
--         window_from_line, window_ms, queue_all, admitted, abandoned, since_ms, let_in, vanished}
--   code (visit) 1 let in now, 2 already inside (its visit renewed), 3 in line; 0 for the other actions;
--     4 (any action but a visit inside) again: more places lapsed than one call purges (common.lua's PURGE),
--     this call purged a batch of them and decided nothing else; the caller sends it again (core/visits.py),
--     so that every call does a bounded amount of work and no position counts an abandoned place
--   position: the people ahead of the visitor in line + 1, abandoned places purged first; 0 when inside
--   window_admitted, window_from_line, window_ms: visitors let in over the last minute, or since the room's
--     latest change of pace if later (back to the oldest sample in that time), those of them let in from the
--     line (the rate the line moves at, which an estimated wait divides by: visitors who walked into a room
--     with space say nothing of it), and the window's length (0: no sample yet)
--   queue_all 1 or 0; admitted and abandoned: the state's counters, counted since since_ms
--   let_in: how many 'let_in' let in; vanished: common.lua's `context` report, '' when none
--   refused (code 5, a visit): 'places' or 'new', the client's bound that refused a new place; '' otherwise
--     (code 6: the launch's pre-queue has not started; no place)
--   visit_ms: the average visit's length (ms: a moving average of the visits that ended, released or lapsed;
--     0 before any), which an estimate falls back on: the limit's worth of visitors every visit_ms
--   full_since: when the line last formed (ms; 0 while nobody waits); pace: the room's latest change of pace
local AGAIN, REFUSED, NOT_YET, CHALLENGE = 4, 5, 6, 7
-- The launch mode's places: who comes before the opening (or to a random-order room) takes the place its
-- caller's keyed hash of its ticket says, 1..SHUFFLE_SPAN; first-come tickets of a room with either come
-- after LATER, so every pre-queued place is ahead of every place taken after the opening.
local SHUFFLE_SPAN = 1099511627776
local LATER = 2199023255552
-- The admission rate is measured over the last WINDOW_MS, or since the room's latest change of pace if later:
-- a launch's first minute is not averaged with the quiet before it (the review: 4-10x too long a wait).
local SAMPLE_MS = 5000
local SLOTS = 13
local WINDOW_MS = 60000
local FIELDS = {'limit', 'used', 'fence', 'expires_at', 'hold_avg', 'peak', 'sampled_at', 'ticket', 'admitted',
                'walked_in', 'abandoned', 'queue_all', 'turned_away'}
local SAMPLE_FIELDS = {'since', 'pace', 'p', 'pace_limit', 'full_since', 'moved'}
local FIRST_SLOT = #SAMPLE_FIELDS + 1
for slot = 0, SLOTS - 1 do
  SAMPLE_FIELDS[slot + FIRST_SLOT] = 's' .. slot
end

local cfg = read_config(ARGV[1])
if not cfg.room then
  fail('room needs a waiting room configuration, not ' .. tostring(ARGV[1]))
end
local action, rest = string.match(ARGV[2] or '', '^(%S+) ?(.*)$')
local words = {}
for word in string.gmatch(rest or '', '%S+') do
  if #words == 11 then
    fail('too many fields in the room action ' .. tostring(ARGV[2]))
  end
  words[#words + 1] = word
end
local first = words[1] or ''
local token, lease, hold, wanted, renew, places, per_minute, shuffled, prequeue, random_order, unproven
local client, client_new = KEYS[9], KEYS[10]
if action == 'visit' then
  token = token_arg(first, 'token')
  lease = int_arg(words[2] or '', 'lease', 1, MAX_MS)
  hold = int_arg(words[3] or '', 'max hold', 0, MAX_MS)
  renew = (words[4] or '1') ~= '0'
  places = client and int_arg(words[5] or '0', 'places per client', 0, MAX_LIMIT) or 0
  per_minute = client_new and int_arg(words[6] or '0', 'new places per client a minute', 0, MAX_LIMIT) or 0
  shuffled = int_arg(words[7] or '0', 'shuffled place', 0, SHUFFLE_SPAN)
  prequeue = int_arg(words[8] or '0', 'pre-queue', 0, 9007199254740991)
  random_order = words[9] == '1'
  unproven = words[10] == '0'
elseif action == 'let_in' then
  wanted = int_arg(first, 'visitors let in', 1, MAX_LIMIT)
elseif action == 'queue_all' then
  if first ~= '0' and first ~= '1' then
    fail("queue_all takes '0' or '1'")
  end
elseif action ~= 'figures' then
  fail("room action must be 'visit', 'figures', 'let_in' or 'queue_all', not " .. tostring(action))
end
local meta = ARGV[3] or ''

local now, now_text = server_now_ms()
local st, line, ctx = open_semaphore(cfg, now, now_text, token, FIELDS)
local queue_all = st.queue_all == '1'

-- The admission rate: the state's `admitted` counter sampled every SAMPLE_MS by whichever call comes
-- first in that time; the window reaches back to the oldest sample of the last WINDOW_MS.
local samples = redis.call('HMGET', KEYS[8], unpack(SAMPLE_FIELDS))
local admitted_before = tonumber(st.admitted) or 0
local walked_before = tonumber(st.walked_in) or 0
local counters_now = now_text .. '|' .. int_text(admitted_before) .. '|' .. int_text(walked_before)
local pace = tonumber(samples[2]) or 0
local full_since = tonumber(samples[5]) or 0
local moved = samples[6] or '1'
if moved == '0' then
  -- The line formed at the pace sample: has it moved since (a visit ended elsewhere, in release.lua)? Then
  -- its pace is measured from now, the admissions before excluded.
  local formed_admitted, formed_walked = string.match(samples[3] or '', '^%d+|(%d+)|(%d+)$')
  if admitted_before - walked_before > (tonumber(formed_admitted) or 0) - (tonumber(formed_walked) or 0) then
    moved, pace = '1', now
    add('HSET', KEYS[8], 'pace', now_text, 'moved', '1', 'p', counters_now)
  end
end
if tostring(ctx.limit) ~= (samples[4] or '') then
  -- A new limit (set, paused, resumed): a new pace, measured from now.
  pace = now
  add('HSET', KEYS[8], 'pace', now_text, 'p', counters_now, 'pace_limit', ctx.limit)
end
local window_start = math.max(now - WINDOW_MS, pace)
local oldest_at, oldest_admitted, oldest_walked
for i = 3, #SAMPLE_FIELDS do
  if i == 3 or i >= FIRST_SLOT then
    local at, admitted, walked = string.match(samples[i] or '', '^(%d+)|(%d+)|(%d+)$')
    at = tonumber(at)
    if i == 3 and pace == now then
      at, admitted, walked = now, admitted_before, walked_before
    end
    if at and at >= window_start and at <= now and (not oldest_at or at < oldest_at) then
      oldest_at, oldest_admitted, oldest_walked = at, tonumber(admitted), tonumber(walked)
    end
  end
end
local bucket = math.floor(now / SAMPLE_MS)
local current = tonumber(string.match(samples[bucket % SLOTS + FIRST_SLOT] or '', '^(%d+)|'))
if not current or current < bucket * SAMPLE_MS or current > now then
  add('HSET', KEYS[8], 's' .. (bucket % SLOTS), counters_now)
end
local waiting_before = line.waiting
local since = tonumber(samples[1])
if not since then
  since = now
  add('HSET', KEYS[8], 'since', now_text)
end

local let_in = 0
local refused = ''
-- The visitor's place, as its client address's (KEYS[9]) until `ends`: the key outlives every place in it.
local function client_place(ends)
  if client then
    add('ZADD', client, ends, token)
    add('PEXPIRE', client, math.max(lease, cfg.waiter_ttl) + SAMPLE_MS)
  end
end

local function reply(code, fence, deadline, position)
  local admitted = plan.state.admitted or admitted_before
  local walked = plan.state.walked_in or walked_before
  if waiting_before == 0 and line.waiting > 0 and code ~= AGAIN then
    -- The line forms: the room is full from now, and its pace starts anew when the line first moves (what
    -- came before says nothing of how fast a line that was not there moves; the wait for the first visit
    -- inside to end says nothing of how fast the line will move once it does).
    full_since, pace, moved = now, now, '0'
    add('HSET', KEYS[8], 'full_since', now_text, 'pace', now_text, 'moved', '0', 'p',
        now_text .. '|' .. int_text(admitted) .. '|' .. int_text(walked))
  elseif moved == '0' and admitted - admitted_before > walked - walked_before then
    -- The line's first move since it formed: its pace is measured from here, this admission excluded.
    pace, moved = now, '1'
    add('HSET', KEYS[8], 'pace', now_text, 'moved', '1', 'p', now_text .. '|' .. int_text(admitted) .. '|'
        .. int_text(walked))
    oldest_at, oldest_admitted, oldest_walked = now, admitted, walked
  end
  sample(ctx, cfg, line.waiting)
  settle(ctx)
  commit(st, cfg, now)
  if client then
    -- Places that ended go (removals last; every call adds one entry at most, so this stays small).
    redis.call('ZREMRANGEBYSCORE', client, '-inf', now)
  end
  local window_admitted, window_from_line, window_ms = 0, 0, 0
  if moved ~= '0' and oldest_at and admitted >= oldest_admitted and walked >= oldest_walked then
    window_admitted, window_ms = admitted - oldest_admitted, now - oldest_at
    window_from_line = math.max(window_admitted - (walked - oldest_walked), 0)
  end
  local abandoned = plan.state.abandoned or tonumber(st.abandoned) or 0
  local visit_ms = tonumber(plan.state.hold_avg or st.hold_avg) or 0
  local answer = {code, fence, deadline, ctx.used, ctx.limit, line.waiting, now, position, window_admitted,
                  window_from_line, window_ms, queue_all and 1 or 0, admitted, abandoned, since, let_in,
                  ctx.vanished or '', refused, math.floor(visit_ms), line.waiting > 0 and full_since or 0, pace}
  if action ~= 'visit' then
    -- The operators' figures: visitors turned away, and the times in line and inside, bucket by bucket.
    answer[#answer + 1] = plan.state.turned_away or tonumber(field(st, 'turned_away')) or 0
    local names = {}
    for i = 0, ROOM_BUCKETS - 1 do
      names[#names + 1] = 'wl' .. i
      names[#names + 1] = 'vi' .. i
    end
    local counts = redis.call('HMGET', K.state, unpack(names))
    for i, name in ipairs(names) do
      answer[#answer + 1] = plan.state[name] or tonumber(counts[i]) or 0
    end
  end
  return answer
end

-- Places lapsed beyond this call's batch: purge the batch, decide nothing (queue_all is recorded: asking
-- again sets it again), and have the caller ask again. A visitor inside is answered at once below.
local function again()
  return reply(AGAIN, 0, 0, 0)
end

if action ~= 'visit' then
  if line.more then
    if action == 'queue_all' then
      queue_all = first == '1'
      set_state('queue_all', first)
    end
    return again()
  end
  if action == 'let_in' then
    -- The next `wanted` in line, whatever the limit: the line's own protocol, with that much room.
    local limit = ctx.limit
    ctx.limit = ctx.used + math.min(wanted, line.waiting)
    local before = ctx.granted
    serve_line(ctx, line, cfg)
    let_in = ctx.granted - before
    ctx.limit = limit
  else
    if action == 'queue_all' then
      queue_all = first == '1'
      set_state('queue_all', first)
    end
    serve_line(ctx, line, cfg)
  end
  return reply(0, 0, 0, 0)
end

-- Inside: the visit goes on (never shorter than it was: another tab of the visitor may count on it).
local held = redis.call('ZSCORE', K.holders, token)
if held and tonumber(held) > now then
  local info = parse_info(redis.call('HGET', K.info, token))
  local deadline = tonumber(held)
  if renew then
    -- A request the view answers renews the visit; a poll the room answers (204) does not: a visit is kept
    -- by using the site, not by asking the room.
    deadline = renew_held(token, info, deadline, now, lease)
  end
  outlive(deadline)
  client_place(deadline)
  serve_line(ctx, line, cfg)
  return reply(2, tonumber(info.fence), deadline, 0)
end

if line.more then
  return again()
end
local rank = nil
if line.raw > 0 and not line.dead[token] then
  rank = redis.call('ZRANK', K.queue, token)
end
-- Its turn: fewer than (limit - inside) people ahead of it (serve_line lets them in, in order, a batch at
-- most, and returns true when it reaches the caller; those it did not reach still fit ahead of it). New:
-- nobody waits and there is room (unless every new visitor must wait).
local its_turn = serve_line(ctx, line, cfg)
local fits, ahead
if rank then
  -- People ahead: its rank, less those who left the line ahead of it in this call (let in by serve_line,
  -- which stops at the caller, or abandoned).
  ahead = rank - ctx.granted
  if #(line.abandoned or NONE) > 0 then
    local mine = tonumber(redis.call('ZSCORE', K.queue, token))
    for _, ticket in ipairs(line.abandoned) do
      if ticket < mine then
        ahead = ahead - 1
      end
    end
  end
  fits = its_turn or ahead < ctx.limit - ctx.used
else
  fits = not queue_all and line.waiting == 0 and ctx.used < ctx.limit
end

if not rank and prequeue > 0 and now < prequeue then
  return reply(NOT_YET, 0, 0, 0)  -- the launch's pre-queue is not open yet: no place, nothing counted
end
if not rank and unproven then
  return reply(CHALLENGE, 0, 0, 0)  -- a new place costs a proof of work: none yet, so no place
end
-- A new place: within its client's bounds, or refused (counted as turned away: no place, no line).
if not rank and (places > 0 or per_minute > 0) then
  if places > 0 and redis.call('ZCOUNT', client, '(' .. now, '+inf') >= places then
    -- At its bound by the count: check each place (a visit the site ended, or an operator, leaves its entry
    -- until it would have ended). `places` is at most 1,000 (E020): bounded work, and only at the bound.
    local held_by_client = 0
    for _, other in ipairs(redis.call('ZRANGEBYSCORE', client, '(' .. now, '+inf', 'LIMIT', 0, places)) do
      local inside = tonumber(redis.call('ZSCORE', K.holders, other))
      if (inside and inside > now) or (other ~= token and redis.call('ZSCORE', K.queue, other)) then
        held_by_client = held_by_client + 1
      else
        drop('ZREM', client, other)
      end
    end
    if held_by_client >= places then
      refused = 'places'
    end
  end
  if refused == '' and per_minute > 0 then
    local bucket, at = string.match(redis.call('GET', client_new) or '', '^([%d.]+)|(%d+)$')
    bucket = math.min(per_minute, (tonumber(bucket) or per_minute) + (now - (tonumber(at) or now)) * per_minute / 60000)
    if bucket < 1 then
      refused = 'new'
    else
      add('SET', client_new, string.format('%.3f', bucket - 1) .. '|' .. now_text, 'PX', 60000)
    end
  end
  if refused ~= '' then
    -- A real refusal (no place, no line), unlike a poll of a visitor in line, which is not counted as one.
    count(st, 'turned_away')
    return reply(REFUSED, 0, 0, 0)
  end
end

-- The room's new visitors a minute (its launch mode): one who fits waits if they are all in.
if fits and not room_may_admit(ctx, cfg) then
  fits = false
end

if fits then
  if rank then
    local request = parse_waiter(redis.call('HGET', K.qweight, token))
    room_time(st, 'wl', now - (request and tonumber(request.nonce) or now))
    leave_line(line, token)
  end
  local fence, deadline = grant(ctx, token, 1, lease, hold, '', meta, '1')
  client_place(deadline)
  count(st, 'admitted')
  if not rank then
    count(st, 'walked_in')
  end
  ctx.caller = nil
  serve_line(ctx, line, cfg)
  return reply(1, fence, deadline, 0)
end

-- Its position: the people ahead of it who will not be let in first. Those the room already has space for
-- (a batch is let in per call, and a raised limit may have made room for more) are about to leave the line.
local position
local free = math.max(ctx.limit - ctx.used, 0)
if rank then
  position = ahead - free + 1
  add('ZADD', K.alive, 'XX', now + cfg.waiter_ttl, token)
  client_place(now + cfg.waiter_ttl)
else
  -- A newcomer, or a visitor who lost its place (abandoned, its visit over): the next ticket, at the back;
  -- before a launch's opening, or in a random-order room, the place its shuffle gives it.
  local ticket = next_ticket(st)
  local placed = false  -- a shuffled place, not the back of the line
  if shuffled > 0 and cfg.opens > 0 and now < cfg.opens then
    ticket, placed = shuffled, true
  elseif shuffled > 0 and random_order then
    ticket, placed = LATER + shuffled, true
  elseif cfg.opens > 0 or random_order then
    ticket = LATER + ticket
  end
  keep(K.queue, token)
  keep(K.alive, token)
  keep(K.qweight, token)
  join_line(line, now, token, ticket)
  -- Its request, as any waiter's, with its join time where a waiter's nonce goes (the time it waits in line).
  add('HSET', K.qweight, token, '1|' .. lease .. '|' .. int_text(cfg.waiter_ttl * 2) .. '|' .. hold .. '|'
      .. ticket .. '|' .. now_text .. '|' .. meta)
  add('ZADD', K.alive, now + cfg.waiter_ttl, token)
  client_place(now + cfg.waiter_ttl)
  local behind = line.waiting
  if placed then
    -- A shuffled place, not the back: those ahead of it (less those who left the line in this call).
    behind = redis.call('ZCOUNT', K.queue, '-inf', '(' .. int_text(ticket)) - ctx.granted
    for _, other in ipairs(line.abandoned or NONE) do
      if other < ticket then
        behind = behind - 1
      end
    end
  end
  position = math.max(behind - free, 0) + 1
  line.waiting = line.waiting + 1
end
outlive(now + cfg.waiter_ttl)
return reply(3, 0, 0, position)
