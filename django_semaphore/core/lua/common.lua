-- The start of the library (scripts.py builds it: this file, then each operation's file as the body
-- of a function registered under the library's versioned name). Loaded once with FUNCTION LOAD, it
-- defines its helpers once, not on every call, and every operation stays one FCALL. Where the server
-- has no Functions, each operation is a script of its own (this file, adaptive.lua, the operation)
-- run with EVALSHA, which defines the helpers on every call: what a table below keeps between
-- calls (parsed configurations, clock texts) is only ever a cache.
--
-- THE ARGUMENT CONTRACT (the same for every script)
--   KEYS[1] holders  ZSET  holder token -> lease deadline (ms, server clock)
--   KEYS[2] info     HASH  holder token -> "weight|acquired_ms|fence|nonce|hold_until_ms|metadata": the record of
--                          the holders whose record is not kept in the state hash (see `folded`)
--   KEYS[3] state    HASH  "#" .. token -> the holder's record as in info, for the holders `folded` names;
--                          used (sum of held weights), fence (never reset), limit (runtime override),
--                          ticket (waiting-line counter), expires_at (partitions), audited_at,
--                          seen_at (when a script last served a line with waiters in it),
--                          hold_avg and peak/sampled_at (Retry-After, history) and the outcome counters;
--                          an adaptive semaphore adds alimit (the limit its rule set), alimit_at and
--                          alimit_why (when and why it last moved), best (the lowest window's average
--                          hold, drifting up) and its current window: ws (start), wsum and wn (sum and
--                          count of its holds, ms), wlost (1 if a lease was lost in it), wpeak (peak used)
--   KEYS[4] queue    ZSET  waiter token -> ticket (first come, first served)
--   KEYS[5] alive    ZSET  waiter token -> heartbeat deadline (ms); a waiter that missed it but may come
--                          back keeps its entry (and its ticket in qweight) for a grace period
--   KEYS[6] qweight  HASH  waiter token -> "weight|lease_ms|claim_ms|hold_ms|ticket|nonce|metadata":
--                          its own request, so a release can grant it without being asked
--   KEYS[7] history  LIST  "sampled_at_ms|peak_used|waiting|limit" samples (whole semaphores only; samples
--                          written before the limit was recorded have three fields)
--   KEYS[8] the caller's own wake list, for the scripts that act for one waiter (acquire, cancel)
--   ARGV[1] the semaphore's configuration, "limit waiter_ttl_ms every_ms keep idle_ms fair whole":
--           limit from settings (a runtime override in state wins); a waiter not heard from for
--           waiter_ttl_ms leaves the line; one history sample per every_ms at most (0: none),
--           keep samples; the keys expire idle_ms after the last lease or heartbeat; fair 1 =
--           first come, first served, 0 = a free permit goes to whoever asks first; whole 1 = a
--           whole semaphore, whose state and history are kept for good (a partition's go too)
--           An adaptive limit (adaptive.lua) follows, " min max initial target_ms window_ms backoff
--           tolerance": the limit its rule sets stays within min and max (integers), starting at
--           initial; target_ms is the window's average hold above which the limit is cut (0: none,
--           the rule compares with best * tolerance instead); window_ms is how long a window runs
--           (one decision each); backoff (0 to 1) multiplies the limit when it is cut; tolerance
--           (above 1) multiplies the best window average into the bound when there is no target. A caller
--           sending the seven fields only (the configuration before adaptive limits) gets the fixed
--           limit: the adaptive fields in the state hash are left as they are.
--           A waiting room's (never adaptive) ends with " room" instead: its waiters are visitors asking
--           every few seconds, waiter_ttl_ms is its abandon time, and a waiter past it has lost its place
--           (read_line); a permit handed to a waiter lasts until its abandon time (serve_line), and the
--           state hash counts `admitted` (visitors let in), `abandoned` (places lost) and `queue_all` (room.lua).
--   ARGV[2...] the operation's own arguments, listed in each script's header.
--   Other waiters' wake lists, <base>wake:<token>, are not in KEYS: whom a release wakes is only
--   known once it has read the line. They share KEYS[1]'s hash tag, so they live in its slot.
--
-- ABORT-SAFE WRITES
-- Scripts do not roll back. While a Cluster slot is MIGRATING, Redis fails any command of a
-- script whose key is missing from the node (it only starts a script whose KEYS all exist), and
-- a key a script empties is deleted. So every script reads first, decides in Lua, and then
-- writes in `commit`, in this order: additions (which never delete a key), the state hash,
-- expiries, removals (which may delete keys; nothing touches a key after them), and last the
-- other waiters' wake lists, through pcall (a lost note is covered by the waiter's timer).
-- A script cut short by anything else therefore leaves `used` too high at worst, never too low,
-- and `audit` recounts it from the holders.

local MAX_LIMIT = 1000000000
local MAX_MS = 315360000000          -- ten years
local AUDIT_EVERY_MS = 1000          -- recount `used` from the holders at most this often
local LAPSED_GRACE_TTLS = 2          -- a lapsed waiter keeps its ticket this many waiter TTLs
local BATCH = 1000                   -- members per HMGET/HDEL/ZREM (Lua's unpack has a limit)
-- Lapsed entries (ended leases, waiters past their heartbeat) one call purges at most, and visitors a
-- waiting room's call lets in at most: every call does a bounded amount of work, and a burst that lapses
-- at once (a hundred thousand places) is purged by the calls that follow, a batch each, never in one.
local PURGE = 250

-- One call's arguments and key names, set by `begin` (calls run one at a time), and its configuration,
-- set by `read_config`.
local KEYS, ARGV, K, BASE, CFG

-- Refuse an argument before anything is written: nothing a caller sends may corrupt shared state.
-- A plain string at level 0 (no position prefix): Redis before 7 cannot raise an error table.
local function fail(message)
  error('django_semaphore: ' .. message, 0)
end

local function int_arg(value, name, low, high)
  if value == '0' and low <= 0 then
    return 0  -- the commonest value of the optional ones, without parsing a number
  end
  local n = tonumber(value)
  if not n or n % 1 ~= 0 or n < low or n > high then
    fail(name .. ' must be an integer from ' .. low .. ' to ' .. high .. ', not ' .. tostring(value))
  end
  return n
end

local function token_arg(value, name)
  if type(value) ~= 'string' or #value == 0 or #value > 200 then
    fail(name .. ' must be 1 to 200 bytes')
  end
  return value
end

-- Parsed configurations, by their text: a site has a handful, each parsed once per library load.
local configs, config_count = {}, 0

-- The adaptive fields at the end of a configuration (see the header); nil when there are none.
local function read_adaptive(rest)
  if rest == '' then
    return nil
  end
  local low, high, initial, target, window, backoff, tolerance =
    string.match(rest, '^ (%d+) (%d+) (%d+) (%d+) (%d+) (%S+) (%S+)$')
  if not low then
    fail('bad adaptive configuration ' .. rest)
  end
  local a = {min = int_arg(low, 'adaptive min', 1, MAX_LIMIT), max = int_arg(high, 'adaptive max', 1, MAX_LIMIT),
             initial = int_arg(initial, 'adaptive initial', 1, MAX_LIMIT), target = int_arg(target, 'target', 0, MAX_MS),
             window = int_arg(window, 'window', 1, MAX_MS), backoff = tonumber(backoff),
             tolerance = tonumber(tolerance)}
  if a.min > a.max or not a.backoff or a.backoff <= 0 or a.backoff >= 1 or not a.tolerance or a.tolerance <= 1 then
    fail('bad adaptive configuration ' .. rest)
  end
  return a
end

local function read_config(raw)
  local cfg = configs[raw]
  if cfg then
    CFG = cfg
    return cfg
  end
  local limit, ttl, every, keep, idle, fair, whole, rest =
    string.match(raw or '', '^(%d+) (%d+) (%d+) (%d+) (%d+) ([01]) ([01])(.*)$')
  if not limit then
    fail('bad configuration argument ' .. tostring(raw))
  end
  -- A room's launch mode (room.lua): " room <opens_ms> <new_per_minute>", both 0 for none.
  local opens, new_per_minute = string.match(rest, '^ room (%d+) (%d+)$')
  local room = rest == ' room' or opens ~= nil
  cfg = {limit = int_arg(limit, 'limit', 0, MAX_LIMIT), waiter_ttl = int_arg(ttl, 'waiter ttl', 1, MAX_MS),
         every = tonumber(every), keep = int_arg(keep, 'samples kept', 1, 100000),
         idle = int_arg(idle, 'idle expiry', 1, MAX_MS), fair = fair == '1', whole = whole == '1',
         adaptive = not room and read_adaptive(rest) or nil, room = room,
         opens = tonumber(opens) or 0, new_per_minute = tonumber(new_per_minute) or 0}
  CFG = cfg
  if config_count >= 1000 then
    configs, config_count = {}, 0
  end
  configs[raw], config_count = cfg, config_count + 1
  return cfg
end

-- Integers as text, for the few strings a script builds (Lua would print a fence, ~1.7e15, in
-- exponent form). Numbers passed to redis.call are written exactly by Redis itself: formatting in
-- Lua is one of the dearest things a script does, so it is kept off the common path.
local function int_text(n)
  return string.format('%d', n)
end

-- "000" to "999": the milliseconds of a clock reading as text, each formatted when first needed
-- (a loaded library keeps them; a script run with EVALSHA starts from nothing on every call).
local MS_TEXT = {}

-- The last reading of the server's clock, in microseconds: the floor of a new fence (next_fence).
-- Every operation reads the clock first, so it is always the running operation's own reading.
local clock_us = 0

-- The server's clock in ms, as a number and as text (without formatting the number).
local function server_now_ms()
  local t = redis.call('TIME')
  local us = tonumber(t[2])
  clock_us = tonumber(t[1]) * 1000000 + us
  local ms = math.floor(us / 1000)
  local text = MS_TEXT[ms]
  if not text then
    text = string.format('%03d', ms)
    MS_TEXT[ms] = text
  end
  return tonumber(t[1]) * 1000 + ms, t[1] .. text
end

-- The counters here are what only the server sees (leases it reclaimed, renewals and releases of a lease or
-- token gone, operators' force releases, permits ended at their max hold): how each attempt ended and
-- each permit was given back is counted by the process that made the call (core/tally.py), per name.
local STATE_FIELDS = {'limit', 'used', 'fence', 'ticket', 'expires_at', 'audited_at', 'seen_at', 'hold_avg', 'peak',
                      'sampled_at', 'refused', 'expired', 'lost', 'forced', 'max_hold', 'alimit', 'alimit_at',
                      'alimit_why', 'best'}

-- Fields of the state hash every operation reads at once; any other is read when first used (a
-- rarer path: a refusal, a waiting line), so the common path reads the hash once, and briefly.
local HOT_FIELDS = {'limit', 'used', 'fence', 'expires_at', 'hold_avg', 'peak', 'sampled_at'}
-- An adaptive semaphore's operations also read its rule's limit and window at once (see adaptive.lua).
local ADAPTIVE_HOT_FIELDS = {'limit', 'used', 'fence', 'expires_at', 'hold_avg', 'peak', 'sampled_at', 'alimit',
                             'ws', 'wsum', 'wn', 'wlost', 'wpeak', 'best'}

-- The state hash's `fields` (`false` for one it lacks); `st.created` when it has none of them.
local function read_state(fields)
  fields = fields or (CFG and CFG.adaptive and ADAPTIVE_HOT_FIELDS) or HOT_FIELDS
  local values = redis.call('HMGET', K.state, unpack(fields))
  local st = {}
  local found = false
  for i, name in ipairs(fields) do
    st[name] = values[i]
    found = found or values[i]
  end
  st.created = not found
  return st
end

-- One field of the state hash, read now if the first read did not fetch it.
local function field(st, name)
  local value = st[name]
  if value == nil then
    value = redis.call('HGET', K.state, name) or false
    st[name] = value
  end
  return value
end

local function parse_info(value)
  if not value then
    return {weight = 1, acquired = 0, fence = '0', nonce = '', hold_until = 0, meta = ''}
  end
  local w, acquired, fence, nonce, hold_until, meta = string.match(value, '^(%d+)|(%d+)|(%d+)|([^|]*)|(%d+)|(.*)$')
  return {weight = tonumber(w) or 1, acquired = tonumber(acquired) or 0, fence = fence or '0',
          nonce = nonce or '', hold_until = tonumber(hold_until) or 0, meta = meta or ''}
end

-- Where a holder's record is kept. In the state hash, under "#" .. token (RECORD), for a permit of one
-- (weight 1) of a semaphore that is not a waiting room, granted to a caller of this version (whose nonce
-- has 17 characters, an "n" before 16 hex digits, where an older version's has 16: a waiter's request
-- carries it, so a release knows whom it hands a permit to) under a random token of 32 hex digits (an
-- identity's is "id-" before 32): lengths, the cheapest test a script can make (fast.lua's fast_folded
-- makes it alike). One field of the hash every call reads and writes
-- anyway, so a grant and a release cost no command of their own for it. Any other record stays in the
-- info hash: an older version reads records there only, and counts a holder whose record it cannot find
-- as a permit of one. So a weighted permit is never counted short (the limit holds whoever recounts), a
-- permit handed to an older version's waiter, an identity an older process may acquire again and a
-- room's visit (room.lua reads info) are whole to it; what an older version does not see of the others
-- is their metadata on its dashboard, and the record of such a holder it reclaims or force-releases
-- stays behind in the state hash (docs/compatibility.md).
local RECORD = '#'

local function folded(token, weight, nonce)
  return weight == 1 and #nonce == 17 and #token == 32 and not (CFG and CFG.room)
end

-- A holder's record wherever it is kept (false: none).
local function holder_record(token)
  return redis.call('HGET', K.state, RECORD .. token) or redis.call('HGET', K.info, token)
end

local function info_text(weight_text, acquired_text, fence, nonce, hold_until, meta)
  local hold_text = hold_until == 0 and '0' or int_text(hold_until)
  return weight_text .. '|' .. acquired_text .. '|' .. int_text(fence) .. '|' .. nonce .. '|' .. hold_text .. '|' .. meta
end

local function parse_waiter(value)
  if not value then
    return nil
  end
  local w, lease, claim, hold, ticket, nonce, meta = string.match(value, '^(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|([^|]*)|(.*)$')
  if not w then
    return nil
  end
  return {weight = tonumber(w), weight_text = w, lease = tonumber(lease), claim = tonumber(claim),
          hold = tonumber(hold), ticket = tonumber(ticket), nonce = nonce, meta = meta}
end

-- A waiter's own SEMAPHORE_WAITER_TTL (ms): half the claim its request carries (the scripts' setting for
-- a waiter whose request is gone). It beats at least this often, and a permit handed to it lives this
-- long until it renews: a waiter that died in line ties a permit for one of its TTLs at most.
local function waiter_ttl(request, cfg)
  return request and math.max(math.floor(request.claim / 2), 1) or cfg.waiter_ttl
end

-- THE WRITE PLAN ------------------------------------------------------------

-- removes: one command per key (so no key is touched after a removal emptied it), members deduplicated.
local plan

local function clear(t)
  for k in pairs(t) do
    t[k] = nil
  end
end

-- Every operation starts here: its keys, its arguments, and an empty write plan. The tables that
-- every call needs are kept and emptied, not made anew: garbage is most of what a call costs Lua
-- (the other lists are made when first needed: most calls need few of them).
K = {}
plan = {adds = {}, state = {}, created = {}}
local function begin(keys, args)
  KEYS, ARGV, CFG = keys, args, nil
  K.holders, K.info, K.state, K.queue = keys[1], keys[2], keys[3], keys[4]
  K.alive, K.qweight, K.history, K.own_wake = keys[5], keys[6], keys[7], keys[8]
  BASE = nil
  clear(plan.adds)
  clear(plan.state)
  clear(plan.created)
  plan.removes, plan.remove_order, plan.deletes, plan.notes = nil, nil, nil, nil
  plan.last_deadline = 0
end

-- The key prefix shared by the semaphore's keys, to name waiters' wake lists (keys[1] is <base>holders).
local function base()
  BASE = BASE or string.sub(K.holders, 1, -8)
  return BASE
end

local function add(...)
  plan.adds[#plan.adds + 1] = {...}
end

-- A lease or a waiter's heartbeat now runs until `deadline` (ms): the keys must outlive it.
local function outlive(deadline)
  if deadline > plan.last_deadline then
    plan.last_deadline = deadline
  end
end

-- Take `member` out of `key` (ZREM for sorted sets, HDEL for hashes) once the script commits.
local function drop(command, key, member)
  if not plan.removes then
    plan.removes, plan.remove_order = {}, {}
  end
  local entry = plan.removes[key]
  if not entry then
    entry = {command = command, members = {}, seen = {}}
    plan.removes[key] = entry
    plan.remove_order[#plan.remove_order + 1] = key
  end
  if not entry.seen[member] then
    entry.seen[member] = true
    entry.members[#entry.members + 1] = member
  end
end

-- Undo a `drop` of `member` (a holder reclaimed and granted again in one script).
local function keep(key, member)
  local entry = plan.removes and plan.removes[key]
  if entry and entry.seen[member] then
    entry.seen[member] = nil
    for i, candidate in ipairs(entry.members) do
      if candidate == member then
        table.remove(entry.members, i)
        break
      end
    end
  end
end

local function delete(key)
  plan.deletes = plan.deletes or {}
  plan.deletes[#plan.deletes + 1] = key
end

-- `key` did not exist before this script: it needs its partition expiry.
local function created(key)
  plan.created[key] = true
end

local function set_state(field, value)
  plan.state[field] = value
end

local function count(st, name, by)
  local current = plan.state[name] or tonumber(field(st, name)) or 0
  plan.state[name] = current + (by or 1)
end

-- A room's `new_per_minute` (its launch mode): admissions are also limited to that many a minute, a bucket
-- in the state hash ("tokens|at_ms", refilled at that rate, as deep) that each admission takes one from,
-- whoever makes it (room.lua's walk-ins and let-ins, a release's serve_line). True: one more may come in.
local function room_may_admit(ctx, cfg)
  if cfg.new_per_minute <= 0 then
    return true
  end
  if not ctx.bucket then
    local tokens, at = string.match(field(ctx.st, 'bucket') or '', '^([%d.]+)|(%d+)$')
    local refill = (ctx.now - (tonumber(at) or ctx.now)) * cfg.new_per_minute / 60000
    ctx.bucket = math.min(cfg.new_per_minute, (tonumber(tokens) or cfg.new_per_minute) + refill)
  end
  if ctx.bucket < 1 then
    return false
  end
  ctx.bucket = ctx.bucket - 1
  set_state('bucket', string.format('%.3f', ctx.bucket) .. '|' .. ctx.now_text)
  return true
end

-- A waiting room's times, for its operators' percentiles (room.lua's figures): how long a visitor waited in
-- line ('wl'), how long a visit lasted ('vi'), each counted in the state hash under <prefix><bucket>, bucket i
-- for [2^(i/2), 2^((i+1)/2)) seconds (under 1 s in 0; ROOM_BUCKETS of them, the last open-ended).
local ROOM_BUCKETS = 40
local function room_time(st, prefix, ms)
  local seconds = ms / 1000
  local bucket = seconds < 1 and 0 or math.floor(2 * math.log(seconds) / math.log(2)) + 1
  count(st, prefix .. math.min(bucket, ROOM_BUCKETS - 1))
end

-- Whether the wake list `key` holds the note `text`. A wake list holds a few notes at most (LPOS would
-- do, but needs Redis 6.0.6).
local function has_note(key, text)
  for _, found in ipairs(redis.call('LRANGE', key, 0, -1)) do
    if found == text then
      return true
    end
  end
  return false
end

local function note(token, text, ttl_ms, only_if_empty)
  plan.notes = plan.notes or {}
  plan.notes[#plan.notes + 1] = {token = token, text = text, ttl = ttl_ms, only_if_empty = only_if_empty}
end

-- Keep the keys until `idle` after the last lease (or waiter's heartbeat) ends, then let them go:
-- refresh every key when the recorded expiry falls short (a quarter idle period of slack, so a busy
-- semaphore rarely pays for it), and give a key this script creates the recorded one. Every script
-- that sets a deadline, a lease's or a waiter's (`plan.last_deadline`), comes here, so the recorded
-- expiry always outlives every one. A whole semaphore keeps its state and history for good, and its
-- holders (at most its limit: the next call on it reclaims the dead ones) like them; its waiting
-- line, which dead processes could grow without bound, goes when nobody is left in it.
local function apply_expiry(st, cfg, now)
  local needed = math.max(plan.last_deadline, now) + cfg.idle
  local recorded = tonumber(plan.state.expires_at or st.expires_at) or 0
  if recorded >= needed and next(plan.created) == nil then
    return  -- the common case: nothing new, and the recorded expiry still outlives everything
  end
  local expiring = cfg.whole and {K.queue, K.alive, K.qweight}
                   or {K.holders, K.info, K.state, K.queue, K.alive, K.qweight}
  if recorded < needed then
    recorded = needed + math.floor(cfg.idle / 4)
    redis.call('HSET', K.state, 'expires_at', recorded)
    for _, key in ipairs(expiring) do
      redis.call('PEXPIREAT', key, recorded)
    end
  else
    for _, key in ipairs(expiring) do
      if plan.created[key] then
        redis.call('PEXPIREAT', key, recorded)
      end
    end
  end
end

local function commit(st, cfg, now)
  for _, command in ipairs(plan.adds) do
    redis.call(unpack(command))
  end
  local flat = {}
  for field, value in pairs(plan.state) do
    flat[#flat + 1] = field
    flat[#flat + 1] = value
  end
  if #flat > 0 then
    if st.created then
      created(K.state)
    end
    redis.call('HSET', K.state, unpack(flat))
  end
  if #flat > 0 or #plan.adds > 0 then
    apply_expiry(st, cfg, now)
  end
  for _, key in ipairs(plan.remove_order or {}) do
    local entry = plan.removes[key]
    for first = 1, #entry.members, BATCH do
      redis.call(entry.command, key, unpack(entry.members, first, math.min(first + BATCH - 1, #entry.members)))
    end
  end
  for _, key in ipairs(plan.deletes or {}) do
    redis.call('DEL', key)
  end
  for _, n in ipairs(plan.notes or {}) do
    local wake = base() .. 'wake:' .. n.token
    if not n.only_if_empty or redis.pcall('EXISTS', wake) == 0 then
      if not n.only_if_empty then
        redis.pcall('DEL', wake)
      end
      if n.text then
        redis.pcall('RPUSH', wake, n.text)
        redis.pcall('PEXPIRE', wake, n.ttl)
      end
    end
  end
end

-- READING THE SEMAPHORE -----------------------------------------------------

-- The records of `tokens` (false for one without), in order, wherever each is kept: a batch at a time,
-- one HMGET of the state hash, and one of info for those it did not hold.
local function records_of(tokens)
  local records = {}
  for first = 1, #tokens, BATCH do
    local last = math.min(first + BATCH - 1, #tokens)
    local fields, missing = {}, {}
    for i = first, last do
      fields[#fields + 1] = RECORD .. tokens[i]
    end
    for i, value in ipairs(redis.call('HMGET', K.state, unpack(fields))) do
      records[first + i - 1] = value
      if not value then
        missing[#missing + 1] = first + i - 1
      end
    end
    if #missing > 0 then
      local names = {}
      for i, index in ipairs(missing) do
        names[i] = tokens[index]
      end
      for i, value in ipairs(redis.call('HMGET', K.info, unpack(names))) do
        records[missing[i]] = value
      end
    end
  end
  return records
end

local function weights_of(tokens)
  local total, infos = 0, {}
  for i, value in ipairs(records_of(tokens)) do
    local info = parse_info(value)
    infos[i] = info
    total = total + info.weight
  end
  return total, infos
end

-- The holders as this script finds them: leases that ended are reclaimed (crashed or stalled
-- holders), their weight goes back to the pool.
-- `earliest` is the first live deadline (nil: nobody holds a permit).
local NONE = {}  -- an empty list shared by every call (never written to)

local function read_holders(now)
  local h = {expired = NONE, freed = 0, earliest = nil, empty = true, capped = 0, more = false}
  local first = redis.call('ZRANGE', K.holders, 0, 0, 'WITHSCORES')
  if #first == 0 then
    return h
  end
  h.empty = false
  if tonumber(first[2]) > now then
    h.earliest = tonumber(first[2])
    return h
  end
  -- At most PURGE of them: the rest (`more`) stay counted in `used` until a later call purges them.
  h.expired = redis.call('ZRANGEBYSCORE', K.holders, '-inf', now, 'WITHSCORES', 'LIMIT', 0, PURGE + 1)
  local tokens, deadlines = {}, {}
  h.more = #h.expired > 2 * PURGE
  for i = 1, math.min(#h.expired, 2 * PURGE), 2 do
    tokens[#tokens + 1] = h.expired[i]
    deadlines[#deadlines + 1] = tonumber(h.expired[i + 1])
  end
  h.expired = tokens
  local infos
  h.freed, infos = weights_of(tokens)
  h.held_ms = 0  -- a room's visits that ended: how long they held their places, summed (room.lua's visit length)
  h.infos, h.deadlines = infos, deadlines
  for i, info in ipairs(infos) do
    if info.hold_until > 0 and deadlines[i] >= info.hold_until then
      h.capped = h.capped + 1
    end
    h.held_ms = h.held_ms + math.max(deadlines[i] - info.acquired, 0)
  end
  local next_live = redis.call('ZRANGEBYSCORE', K.holders, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  h.earliest = tonumber(next_live[2])
  return h
end

local function drop_holder(token)
  drop('ZREM', K.holders, token)
  drop('HDEL', K.info, token)
  drop('HDEL', K.state, RECORD .. token)
end

local function reclaim(st, h)
  if #h.expired == 0 then
    return
  end
  for _, token in ipairs(h.expired) do
    drop_holder(token)
  end
  count(st, 'expired', #h.expired - h.capped)
  if CFG and CFG.adaptive and #h.expired > h.capped then
    -- A lost lease: the adaptive rule cuts the limit at the end of this window. Holds that ended at
    -- their max hold do not count: that bound is the caller's choice, not a sign of overload.
    set_state('wlost', 1)
  end
  if h.capped > 0 then
    count(st, 'max_hold', h.capped)
  end
  if CFG and CFG.room then
    -- A room's visits that lapsed held their places until their deadline: their length joins the moving
    -- average a release keeps (hold_avg), the visit length an estimated wait falls back on (room.lua).
    for i, info in ipairs(h.infos) do
      room_time(st, 'vi', math.max(h.deadlines[i] - info.acquired, 0))
    end
    local held = h.held_ms / #h.expired
    local avg = tonumber(plan.state.hold_avg or st.hold_avg) or held
    set_state('hold_avg', math.floor(avg + (held - avg) * math.min(#h.expired, 8) / 8))
  end
end

-- Waiters this script takes out of the line (dead, granted or leaving): reads of the line skip them.
local function mark_dead(line, token)
  if line.dead == NONE then
    line.dead = {}
  end
  line.dead[token] = true
  line.dead_count = line.dead_count + 1
end

-- A waiting room's line: a visitor who asked nothing for its abandon time (the waiter TTL) has lost its
-- place at that instant, the caller included (room.lua puts it at the back): no grace period and no pass,
-- so an abandoned place never holds up the line. `line.abandoned` keeps the tickets of those purged, so
-- the caller can tell how many were ahead of it; the state hash counts them. `tokens` is one batch (at most
-- PURGE): while `line.more` says others lapsed too, nobody is let in (serve_line) and room.lua ranks no one,
-- so a position is only ever given on a line without abandoned places in it.
local function abandon_stale(line, st, tokens)
  local tickets = {}
  -- A visitor's place is in the line's three keys at once (room.lua): its request holds its ticket, read
  -- for the batch in one HMGET (a ZSCORE each cost the burst most of its time).
  local requests = redis.call('HMGET', K.qweight, unpack(tokens))
  for i, token in ipairs(tokens) do
    local ticket = requests[i] and string.match(requests[i], '^%d+|%d+|%d+|%d+|(%d+)|')
    drop('ZREM', K.alive, token)
    drop('HDEL', K.qweight, token)
    drop('ZREM', K.queue, token)
    if ticket then
      mark_dead(line, token)
      tickets[#tickets + 1] = tonumber(ticket)
    end
  end
  line.abandoned = tickets
  line.waiting = line.waiting - line.dead_count
  if #tickets > 0 then
    count(st, 'abandoned', #tickets)
  end
  return line
end

-- The waiting line: waiters that stopped heartbeating leave it, so a dead process never blocks it
-- for long. A lapsed waiter (only starved of CPU, perhaps) keeps its ticket for two of its own TTLs
-- (its claim), in case it comes back. When no script served the line for longer than a waiter's
-- TTL (`seen_at`: the server stalled in a fork or on a disk, and the heartbeats it was sent wait in
-- its buffers), a late waiter gets one more TTL instead: a pass, marked by half a millisecond on its
-- deadline (a heartbeat writes a whole one), so a waiter that really died gets one pass only.
local function read_line(now, cfg, st, caller)
  local raw = redis.call('ZCARD', K.queue)
  local line = {raw = raw, waiting = raw, dead = NONE, dead_count = 0, more = false}
  if raw == 0 then
    -- Nobody in line. Lapsed waiters who kept their ticket may linger in `alive`: whoever joins next
    -- judges them, and the line's keys expire with them otherwise.
    return line
  end
  set_state('seen_at', now)
  -- At most PURGE of them (`line.more`: others are left for the calls that follow).
  local stale = redis.call('ZRANGEBYSCORE', K.alive, '-inf', now, 'WITHSCORES', 'LIMIT', 0, PURGE + 1)
  if #stale == 0 then
    return line
  end
  line.more = #stale > 2 * PURGE
  local seen_at = tonumber(field(st, 'seen_at')) or 0
  local tokens, deadlines = {}, {}
  for i = 1, math.min(#stale, 2 * PURGE), 2 do
    tokens[#tokens + 1] = stale[i]
    deadlines[#deadlines + 1] = tonumber(stale[i + 1])
  end
  if cfg.room then
    return abandon_stale(line, st, tokens)
  end
  -- Still in line or not: ZSCORE per waiter (ZMSCORE would read them at once, but needs Redis 6.2).
  local ranks, requests = {}, {}
  for first = 1, #tokens, BATCH do
    local last = math.min(first + BATCH - 1, #tokens)
    local batch_requests = redis.call('HMGET', K.qweight, unpack(tokens, first, last))
    for i = 1, last - first + 1 do
      ranks[first + i - 1] = redis.call('ZSCORE', K.queue, tokens[first + i - 1])
      requests[first + i - 1] = batch_requests[i]
    end
  end
  for i, token in ipairs(tokens) do
    local request = parse_waiter(requests[i])
    local own_ttl = waiter_ttl(request, cfg)
    if token == caller then
      -- The caller itself, late but alive: its own call refreshes its heartbeat.
      line.self_stale = true
    elseif ranks[i] and now - seen_at > own_ttl and deadlines[i] % 1 == 0 then
      add('ZADD', K.alive, 'XX', now + own_ttl + 0.5, token)
      outlive(now + own_ttl + 1)
    elseif ranks[i] then
      mark_dead(line, token)
      drop('ZREM', K.queue, token)
      add('ZADD', K.alive, 'XX', now + own_ttl * LAPSED_GRACE_TTLS, token)
      outlive(now + own_ttl * LAPSED_GRACE_TTLS)
    else
      drop('ZREM', K.alive, token)
      drop('HDEL', K.qweight, token)
      note(token, nil, 0, false)
    end
  end
  line.waiting = line.waiting - line.dead_count
  return line
end

-- `token` leaves the line in this script: later reads of the line skip it.
local function skip_in_line(line, token)
  if not line.dead[token] then
    mark_dead(line, token)
    line.waiting = line.waiting - 1
  end
end

-- The live waiters at the head of the line, in order, with their requests: an iterator over at
-- most `n` of them, read in chunks as far as the caller goes (a line of thousands costs only what
-- is walked).
local function each_head(line, n)
  local offset, given, buffer, index = 0, 0, {}, 1
  return function()
    while given < n do
      if index <= #buffer then
        local head = buffer[index]
        index = index + 1
        given = given + 1
        return head
      end
      local size = math.min(BATCH, n - given + line.dead_count)
      local tokens = redis.call('ZRANGE', K.queue, offset, offset + size - 1)
      if #tokens == 0 then
        return nil
      end
      offset = offset + #tokens
      local live = {}
      for _, token in ipairs(tokens) do
        if not line.dead[token] then
          live[#live + 1] = token
        end
      end
      buffer, index = {}, 1
      if #live > 0 then
        for i, value in ipairs(redis.call('HMGET', K.qweight, unpack(live))) do
          buffer[i] = {token = live[i], request = parse_waiter(value)}
        end
      end
    end
    return nil
  end
end

-- A fence for a new grant: one above the last, and never below the server's clock in microseconds
-- (`clock_us`). The clock is the floor that survives whatever the server forgets: a state restored from
-- an older snapshot (an RDB, an AOF `everysec` that lost its last second, a replica promoted before it
-- had every write) holds an older last fence, and one above it would hand out again a fence granted
-- since; a new semaphore, or one whose state was lost or expired, has none. Every grant costs the
-- server more than a microsecond (a script, several writes) and a restart far more, so the clock has
-- passed every fence granted before it: fences never repeat nor go back, as long as the server's
-- clock does not go back across the loss (docs/failure-modes.md). The fast paths mint it alike
-- (fast.lua's fast_fence).
local function next_fence(last)
  local above = (tonumber(last) or 0) + 1
  if above > clock_us then
    return above
  end
  return clock_us
end

-- Grant `weight` permits to `token` (written by commit); returns its fence and lease deadline.
local function grant(ctx, token, weight, lease_ms, hold_ms, nonce, meta, weight_text)
  -- A token whose lease ran out in this very script is granted anew: it must not be reclaimed.
  keep(K.holders, token)
  keep(K.info, token)
  keep(K.state, RECORD .. token)
  local fence = next_fence(ctx.fence)
  ctx.fence = fence
  local hold_until = hold_ms > 0 and ctx.now + hold_ms or 0
  local deadline = ctx.now + lease_ms
  if hold_until > 0 and deadline > hold_until then
    deadline = hold_until
  end
  if ctx.holders_empty and ctx.granted == 0 then
    created(K.holders)
  end
  add('ZADD', K.holders, deadline, token)
  local record = info_text(weight_text or tostring(weight), ctx.now_text, fence, nonce, hold_until, meta)
  if folded(token, weight, nonce) then
    set_state(RECORD .. token, record)
  else
    created(K.info)  -- (perhaps not new: it then takes the recorded expiry again, which outlives its own)
    add('HSET', K.info, token, record)
  end
  ctx.used = ctx.used + weight
  ctx.granted = ctx.granted + 1
  outlive(deadline)
  if not ctx.earliest or deadline < ctx.earliest then
    ctx.earliest = deadline
  end
  if not ctx.granted_end or deadline < ctx.granted_end then
    ctx.granted_end = deadline
  end
  return fence, deadline
end

-- A holder asking again renews its lease (acquire.lua's identity acquiring again, room.lua's visitor inside):
-- it now ends `lease` ms from now, never sooner than it did (another call holding the token may count on
-- its own lease, `held` its deadline) nor past the holder's max hold (`info.hold_until`). The new deadline.
local function renew_held(token, info, held, now, lease)
  local deadline = math.max(now + lease, held)
  if info.hold_until > 0 and deadline > info.hold_until then
    deadline = info.hold_until
  end
  if deadline > held then
    add('ZADD', K.holders, 'XX', deadline, token)
  end
  return deadline
end

-- The line's next ticket, taken (its counter in the state hash): the place at the back of the line.
local function next_ticket(st)
  local ticket = (tonumber(field(st, 'ticket')) or 0) + 1
  set_state('ticket', ticket)
  return ticket
end

-- `token` takes its place in `line` at `ticket` (written by commit). The first to join an empty line makes
-- its keys (they need their partition expiry) and starts the clock read_line keeps of when a script last
-- served it (`seen_at`, which it moves only while someone waits). acquire.lua's waiters and room.lua's
-- visitors join alike; each then writes its own request (qweight) and heartbeat (alive).
local function join_line(line, now, token, ticket)
  if line.raw == 0 then
    created(K.queue)
    created(K.alive)
    created(K.qweight)
    set_state('seen_at', now)
  end
  add('ZADD', K.queue, ticket, token)
end

-- `token` leaves the line (only a waiter known to be in it: the caller's own line entry is checked).
local function leave_line(line, token)
  drop('ZREM', K.queue, token)
  drop('ZREM', K.alive, token)
  drop('HDEL', K.qweight, token)
  skip_in_line(line, token)
end

-- A lease this script granted may end before the waiter at the head of the line looks again (it
-- learns the earliest lease's end from its own calls, at least every third of its TTL, later when
-- the server's timer is slow): wake it, so it sets its timer for that end, and the permit goes on
-- when the lease does, not at its next heartbeat. Leases of a waiter TTL (this call's setting) or
-- longer are left to the heartbeat: the common hand-off (on a claim, then renewed) reads nothing more.
local function alert_head(ctx, line, cfg)
  if cfg.room or not ctx.granted_end or line.waiting <= 0 or ctx.granted_end - ctx.now >= cfg.waiter_ttl then
    return
  end
  for head in each_head(line, 1) do
    local ttl = waiter_ttl(head.request, cfg)
    if head.token ~= ctx.caller and ctx.granted_end - ctx.now < ttl then
      note(head.token, 'W', ttl * 2, true)
    end
  end
end

-- One protocol for freed capacity, whoever frees it (a release, a lease running out, a waiter
-- leaving, a raised limit). Fair: hand the free permits straight to the waiters at the head of the
-- line, in order, as far as they fit (a head that does not fit stops the line); each gets a grant
-- note "G|fence|deadline|now" on its wake list, so it holds the permit without asking again. Its
-- lease runs one of its own waiter TTLs at first, its heartbeat's span, whether it beat just now or
-- is on a pass: a waiter that died in line (since its last heartbeat, or before an idle gap) ties
-- the permit that long at most. Not fair: wake as many waiters as could fit; they race for the permits.
-- `ctx.caller` (acquire) is granted in place when its turn comes; returns true then. While waiters that
-- missed their heartbeat remain to be judged (`line.more`: more than one call purges), nobody is served: a
-- dead waiter not judged yet would be handed a permit; the calls that follow judge a batch each.
-- (An acquire that is not fair takes a free permit without the line, as always.)
local function serve_line(ctx, line, cfg)
  local free = ctx.limit - ctx.used
  if free <= 0 or line.waiting <= 0 or line.more then
    alert_head(ctx, line, cfg)
    return false
  end
  if not cfg.fair then
    -- A wake-up each for as many as could fit (a thousand at most: the others' timers find out).
    for head in each_head(line, math.min(free, BATCH)) do
      if head.token ~= ctx.caller then
        note(head.token, 'W', cfg.waiter_ttl * 2, true)
      end
    end
    return false
  end
  -- A room lets PURGE in per call at most, its caller included; the calls that follow let the others in
  -- (room.lua ranks its caller against the room left, so a visitor whose turn it is never waits for them).
  for head in each_head(line, cfg.room and math.min(free, PURGE - ctx.granted) or free) do
    local r = head.request
    if not r then
      -- A line entry without its request (edited by hand): drop it rather than block the line.
      leave_line(line, head.token)
    elseif r.weight > ctx.limit - ctx.used then
      alert_head(ctx, line, cfg)
      return false
    elseif head.token == ctx.caller then
      return true
    elseif cfg.room and not room_may_admit(ctx, cfg) then
      return false  -- the room's new visitors a minute are in (room_may_admit): the rest wait their turn
    elseif cfg.room then
      -- A visitor let in while away from its page holds the place until its abandon time, when it would
      -- have lost its place in line anyway, whatever the lease (a lease shorter than a refresh would end
      -- the visit before its next poll); its next request renews the visit (room.lua). No note: a
      -- browser waits on no wake list.
      local until_abandoned = (tonumber(redis.call('ZSCORE', K.alive, head.token)) or ctx.now) - ctx.now
      grant(ctx, head.token, 1, math.max(until_abandoned, 1), r.hold, '', r.meta, '1')
      leave_line(line, head.token)
      count(ctx.st, 'admitted')
      room_time(ctx.st, 'wl', ctx.now - (tonumber(r.nonce) or ctx.now))  -- a room's request keeps its join time
    else
      local fence, deadline = grant(ctx, head.token, r.weight, math.min(r.lease, waiter_ttl(r, cfg)), r.hold, r.nonce,
                                    r.meta, r.weight_text)
      leave_line(line, head.token)
      note(head.token, 'G|' .. int_text(fence) .. '|' .. int_text(deadline) .. '|' .. ctx.now_text, r.claim,
           false)
    end
  end
  alert_head(ctx, line, cfg)
  return false
end

-- `used` is a running sum, kept so capacity is O(1): the weights of every holder in the holders set,
-- ended leases a call has not purged yet included (they go, and their weight with them, a batch per call).
-- It is recounted from the holders whenever it cannot be right (nobody holds a permit, or it is not a whole
-- number), at most once a second when it turns a caller away, and on every status read; not while ended
-- leases wait to be purged (`ctx.backlog`: the sum stays high until they are, never low), unless it must
-- (`forced`: the state was lost or is not a number), when it counts every holder left. A room's holders
-- weigh one each: its `used` is the count of live ones, one ZCOUNT, exact whatever waits to be purged.
local function recount(ctx, forced)
  if CFG and CFG.room then
    ctx.used = ctx.earliest and redis.call('ZCOUNT', K.holders, '(' .. ctx.now, '+inf') or 0
  elseif ctx.backlog then
    if forced then
      ctx.used = weights_of(redis.call('ZRANGE', K.holders, ctx.purged, -1))
    end
  elseif ctx.earliest then
    ctx.used = weights_of(redis.call('ZRANGEBYSCORE', K.holders, '(' .. ctx.now, '+inf'))
  else
    ctx.used = 0
  end
end

-- The acquire script's periodic recount (a caller about to be turned away).
local function audit(ctx)
  if ctx.now - (tonumber(field(ctx.st, 'audited_at')) or 0) >= AUDIT_EVERY_MS then
    recount(ctx)
    set_state('audited_at', ctx.now)
  end
end

-- Utilisation history for the dashboard: at most one sample per `every` ms, carrying the peak use
-- since the previous sample (so short bursts show), capped at `keep` samples.
local function sample(ctx, cfg, waiting)
  if cfg.every <= 0 then
    return nil
  end
  local st = ctx.st
  local old_peak = tonumber(st.peak)
  local peak = math.max(old_peak or 0, ctx.used)
  if ctx.now - (tonumber(st.sampled_at) or 0) >= cfg.every then
    local text = ctx.now_text .. '|' .. peak .. '|' .. waiting .. '|' .. ctx.limit
    add('RPUSH', K.history, text)
    add('LTRIM', K.history, -cfg.keep, -1)
    set_state('sampled_at', ctx.now)
    set_state('peak', ctx.used)
    return text
  elseif peak ~= old_peak then
    set_state('peak', peak)
  end
  return nil
end

-- When a permit is likely to come free (Retry-After): the sooner of the earliest lease end and the
-- typical hold (a moving average of recent holds, or one waiter TTL before any hold was seen).
-- With renewal on, leases run far ahead of the work, so the lease alone would say "much later".
local function expected_free_ms(ctx, cfg)
  local typical = tonumber(ctx.st.hold_avg) or cfg.waiter_ttl
  if not ctx.earliest then
    return typical
  end
  return math.min(math.max(ctx.earliest - ctx.now, 0), typical)
end

-- The adaptive rule's limit (adaptive.lua), within its bounds whatever the state hash says (bounds
-- changed in settings apply at once).
local function adaptive_limit(st, a)
  return math.max(a.min, math.min(a.max, tonumber(st.alimit) or a.initial))
end

-- The limit in force: an operator's override (which pins it, unclamped: 0 pauses), else the adaptive
-- rule's, else the one in settings.
local function limit_in_force(st, cfg)
  local override = tonumber(st.limit)
  if override then
    return override
  end
  if cfg.adaptive then
    return adaptive_limit(st, cfg.adaptive)
  end
  return cfg.limit
end

-- Keys of the semaphore found gone while permits were held (evicted under a maxmemory policy, deleted
-- by hand, lost in a failover): 'holders' when the state counts permits held (`used`, returned) and the
-- holders are gone; 'state' when holders remain and the state hash has no fence (every grant writes
-- one). Expiry does neither: a partition's keys all expire at one recorded time, past every lease.
local function lost_keys(st, h, used)
  if h.empty and used and used > 0 then
    return 'holders', used
  end
  if not h.empty and not st.fence then
    return 'state', nil
  end
  return nil, nil
end

-- The state every script starts from; `used` that is not a whole number (edited by hand, or
-- written by an old bug) is recounted at once, and so is the count of a semaphore whose keys were
-- lost (`ctx.vanished`, "holders|N" or "state|N": what was found gone, and the permits the lost
-- record counted or the holders left hold). The script goes on with what is left: it cannot know
-- who held what vanished; the caller reports it.
local function context(st, cfg, now, now_text, h, caller)
  local used = tonumber(st.used)
  local ctx = {st = st, now = now, now_text = now_text, used_before = used or 0,
               limit = limit_in_force(st, cfg), fence = st.fence,
               used = math.max((used or 0) - h.freed, 0), earliest = h.earliest, holders_empty = h.empty,
               granted = 0, caller = caller, backlog = h.more, purged = #h.expired}
  if cfg.opens > 0 and now < cfg.opens then
    ctx.limit = 0  -- a room's pre-queue: nobody is let in before its opening (room.lua)
  end
  local lost, lost_used = lost_keys(st, h, used)
  local wrong = lost or (st.used and (not used or used < 0 or used ~= math.floor(used)))
  if cfg.room or wrong or not ctx.earliest then
    recount(ctx, wrong)
  end
  if lost then
    ctx.vanished = lost .. '|' .. int_text(math.floor(math.min(lost_used or ctx.used, MAX_LIMIT)))
  end
  if lost == 'state' then
    -- A fence again (seeded from the clock, as for a new semaphore), so the loss is found only once.
    ctx.fence = next_fence(nil) - 1
    set_state('fence', ctx.fence)
  end
  return ctx
end

-- Record `used` and the fence once the script has decided.
local function settle(ctx)
  if ctx.used ~= ctx.used_before then
    set_state('used', ctx.used)
  end
  if ctx.granted > 0 then
    set_state('fence', ctx.fence)
  end
  if CFG and CFG.adaptive and ctx.used > (plan.state.wpeak or tonumber(field(ctx.st, 'wpeak')) or 0) then
    set_state('wpeak', ctx.used)  -- the window's peak: was its limit exercised (adaptive.lua)?
  end
end

-- THE OPENING ---------------------------------------------------------------

-- What every operation on a semaphore does first, once it has read the server's clock (`now` and
-- `now_text`, from server_now_ms: acquire reads it before anything else, to refuse a call that came
-- too late at the price of one TIME). It reads the state hash (`fields`, the hot ones unless given),
-- the holders and the waiting line, builds the context the operation decides with, and plans the
-- reclaim of every lease that ended. `caller` is the token the operation acts for, or nil: its own
-- late heartbeat does not take it out of the line, and `serve_line` grants it in place (no note).
-- It only reads and plans: an operation that returns before `commit` writes nothing.
-- Returns st (read_state), line (read_line) and ctx (context; what read_holders found is in it:
-- `used` less the weight reclaimed, `earliest`, `holders_empty`).
local function open_semaphore(cfg, now, now_text, caller, fields)
  local st = read_state(fields)
  local h = read_holders(now)
  local line = read_line(now, cfg, st, caller)
  local ctx = context(st, cfg, now, now_text, h, caller)
  reclaim(st, h)
  return st, line, ctx
end
