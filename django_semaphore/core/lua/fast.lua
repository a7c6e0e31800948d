-- The fast paths' shared part (scripts.py puts it before fast_acquire.lua and fast_release.lua).
--
-- An acquire and a release in their common case run a few direct commands and none of the prelude:
-- no parsed configuration of common.lua, no write plan, no state read for the dashboard's sake. Each
-- fast function returns nil, having written nothing, as soon as the call is not the common case (or
-- any argument is not in its plain form), and the library's function (or the EVALSHA script) then runs
-- the full operation on the same call, in the same script: no extra round trip, and every rare case,
-- refusal and error keeps its one code path. An EVALSHA script defines the prelude inside a function
-- it calls only then, so the common case does not pay for defining it either.
local FAST_MAX_MS = 315360000000          -- common.lua's MAX_MS: ten years
local FAST_MAX_AT = 9007199254740991      -- the "not after" and "grant before" bound (2^53 - 1)
local fast_configs, fast_config_count = {}, 0  -- limit, every, idle, whole by configuration text (Functions only)
local fast_texts = {}                     -- small integers as text, by value (Functions only)

-- Formatting a number is among the dearest things a script does (a number passed to redis.call is
-- formatted too): small ones (counts of permits) are formatted once each, the others once per call.
local function fast_text(n)
  local text = fast_texts[n]
  if not text then
    text = string.format('%d', n)
    if n < 100000 then
      fast_texts[n] = text
    end
  end
  return text
end

-- The server's clock: ms as a number and as text (TIME's seconds, then its microseconds' first three
-- of six digits: no number is formatted), and TIME's reply itself (a new fence's floor: fast_fence).
local function fast_now()
  local t = redis.call('TIME')
  local text = t[1] .. string.sub('00000' .. t[2], -6, -4)
  return tonumber(text), text, t
end

-- A new grant's fence and its text, as common.lua's next_fence mints it: one above the `last`, and never
-- below the server's clock in microseconds (`t`, TIME's reply), which a state restored from an older
-- snapshot cannot take back. The clock's microseconds are written as text from TIME's own, so the
-- common case (the clock above the last fence) formats no number.
local function fast_fence(last, t)
  local micros = t[1] .. string.sub('00000' .. t[2], -6)
  local floor = tonumber(micros)
  if last + 1 > floor then
    return last + 1, string.format('%d', last + 1)
  end
  return floor, micros
end

-- A grant's reply, as acquire.lua's {code, fence, deadline, used, limit, waiting, now, fresh} with code 1
-- and fresh 0, in one text (replies.py's acquire_fields reads it): a reply of eight integers costs the
-- server several times one text of what the grant has as text already.
local function fast_granted(fence_text, deadline_text, used, limit, waiting, now_text)
  return '1 ' .. fence_text .. ' ' .. deadline_text .. ' ' .. fast_text(used) .. ' ' .. fast_text(limit) .. ' '
    .. fast_text(waiting) .. ' ' .. now_text .. ' 0'
end

-- A grant's lease deadline (ms), capped at its max hold (`hold` ms, 0: none), and the end of that max
-- hold as its holder record writes it ('0': none), as common.lua's grant and info_text make them.
local function fast_deadline(now, lease, hold)
  if hold > 0 then
    return math.min(now + lease, now + hold), string.format('%d', now + hold)
  end
  return now + lease, '0'
end

-- State fields the fast paths read, by the configuration's kind: a history wants `peak` and
-- `sampled_at` (at PEAK and SAMPLED_AT), and every semaphore its recorded expiry `expires_at` (last): the
-- full operations refresh it (a whole semaphore's too, for its waiting line's keys) when it falls short.
-- No outcome counter: how each call ended is counted by the process that made it (core/tally.py).
local PEAK, SAMPLED_AT = 4, 5
local function fast_fields(first, history)
  local fields = {first[1], first[2], first[3]}
  if history then
    fields[PEAK], fields[SAMPLED_AT] = 'peak', 'sampled_at'
  end
  fields[#fields + 1] = 'expires_at'
  return fields
end
local ACQUIRE_FIELDS = {'limit', 'used', 'fence'}
-- What an acquire behind a line reads (fast_acquire.lua's fast_line_acquire), the same whatever the kind.
local LINE_FIELDS = {'limit', 'used', 'fence', 'peak', 'sampled_at', 'hold_avg', 'ticket', 'audited_at', 'expires_at'}
local RELEASE_FIELDS = {'used', 'fence', 'hold_avg'}

-- limit, waiter_ttl_ms, every_ms, idle_ms, fair, whole (and the state fields each fast path reads) of a
-- fixed-limit configuration whose every field is in range; nil for an adaptive one, a waiting room's, or
-- any configuration common.lua's read_config would refuse.
local function fast_config(raw)
  local found = fast_configs[raw]
  if found then
    return found
  end
  local limit, ttl, every, keep, idle, fair, whole =
    string.match(raw, '^(%d+) (%d+) (%d+) (%d+) (%d+) ([01]) ([01])$')
  if not limit then
    return nil
  end
  limit, ttl, every, keep, idle = tonumber(limit), tonumber(ttl), tonumber(every), tonumber(keep), tonumber(idle)
  if limit > 1000000000 or ttl < 1 or ttl > FAST_MAX_MS or keep < 1 or keep > 100000 or idle < 1
      or idle > FAST_MAX_MS then
    return nil
  end
  found = {limit = limit, waiter_ttl = ttl, every = every, idle = idle, fair = fair == '1', whole = whole == '1'}
  found.acquire_fields = fast_fields(ACQUIRE_FIELDS, every > 0)
  found.release_fields = fast_fields(RELEASE_FIELDS, every > 0)
  -- The release reads the releaser's record with them (fast_release sets its name, last, on each call).
  found.release_read = {unpack(found.release_fields)}
  if fast_config_count >= 1000 then
    fast_configs, fast_config_count = {}, 0  -- as common.lua's cache: a site has a handful
  end
  fast_configs[raw], fast_config_count = found, fast_config_count + 1
  return found
end

-- Write the state hash once: `used`, an operation's fields (name, value, ...), and the peak as common.lua's
-- `sample` keeps it between samples (a history's: `used` above the peak read, `st[PEAK]`, becomes the peak).
local function fast_set_state(state, cfg, st, used, ...)
  local used_text = fast_text(used)
  local old_peak = cfg.every > 0 and tonumber(st[PEAK])
  if cfg.every > 0 and (not old_peak or used > old_peak) then
    redis.call('HSET', state, 'used', used_text, 'peak', used_text, ...)
  else
    redis.call('HSET', state, 'used', used_text, ...)
  end
end

-- Where a grant's record goes, as common.lua's `folded` decides for a permit of one (the fast paths grant
-- no other): true, the state hash (under "#" .. token, written with the state); false, the info hash.
local function fast_folded(token, nonce)
  return #nonce == 17 and #token == 32
end

-- Write a permit's record where it goes, and then the state hash (`fields`: name, value...), with the record
-- in it when it goes there: one HSET of the state either way (fast_set_state), and one of info otherwise,
-- whose expiry a partition then sets as common.lua's apply_expiry does for a key a grant writes (`recorded`).
local function fast_record(info, state, cfg, st, used, token, record, folded, recorded, ...)
  if folded then
    return fast_set_state(state, cfg, st, used, '#' .. token, record, ...)
  end
  redis.call('HSET', info, token, record)
  fast_set_state(state, cfg, st, used, ...)
  if not cfg.whole then
    redis.call('PEXPIREAT', info, recorded)
  end
end
