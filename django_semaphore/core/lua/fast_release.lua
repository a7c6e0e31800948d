-- The release's fast path: the common case in a few direct commands, without the prelude.
--
-- The common case: a fixed-limit semaphore (no adaptive rule, no waiting room) whose holder `token`
-- gives back a lease that has not ended (the grant named by the nonce or fence, when the caller names
-- one), no other lease that ended waiting to be reclaimed, the state hash whole (a fence, a sane
-- `used`), no history sample due, and the recorded expiry (`expires_at`) outliving the release (and a
-- grant it makes) by the idle period. Then the release is exactly what release.lua would do: `used`,
-- the hold average and the peak, the holder's removal, reply 1; and, with a
-- line behind it, what release.lua's serve_line does with the one permit it frees (fast_hand_on).
--
-- Anything else returns nil having written nothing, and the caller runs release.lua on the same
-- call (in the same script or function: no extra round trip). It takes KEYS and ARGV as release.lua
-- does, and needs none of the prelude, only fast.lua.

-- The releaser's record goes from where it was kept (`kept_in`, the state hash or info), as common.lua's
-- drop_holder takes it from both: a removal, which nothing touches after.
local function fast_forget(keys, token, kept_in)
  if kept_in == keys[3] then
    redis.call('HDEL', kept_in, '#' .. token)
  else
    redis.call('HDEL', kept_in, token)
  end
end

-- A release with a line behind it: exactly one permit comes free (the semaphore was full), and nobody
-- in line missed a heartbeat (common.lua's read_line would judge them). Fair, the permit goes to the
-- head of the line as serve_line hands it: a grant on a claim of the waiter's own TTL, its "G" note on
-- the waiter's wake list. Not fair, the head is woken ("W", unless a note waits
-- there already) to race for it. Anything else (a head asking more than one permit, or without its
-- request; a claim shorter than this call's waiter TTL, which serve_line follows with an alert to the
-- next head; permits freed for more than one; the releaser's lease gone) returns nil, nothing written.
--
-- Writes, in common.lua's abort-safe order: fair, the new holder and its record, the state hash, then
-- the removals (the releaser's lease and record, the head's place in line: nothing touches a key after
-- its removal); not fair, the removal first as without a line. Last the head's wake list, through pcall
-- (a lost note is covered by the waiter's timer).
local function fast_hand_on(keys, cfg, token, st, left, hold_avg, now, now_text, clock, head, kept_in)
  local holders, info, state, queue, alive, qweight = keys[1], keys[2], keys[3], keys[4], keys[5], keys[6]
  local limit = redis.call('HGET', state, 'limit')
  local fence = tonumber(st[2])
  if not fence or (tonumber(limit) or cfg.limit) - left ~= 1
      or #redis.call('ZRANGEBYSCORE', alive, '-inf', now, 'LIMIT', 0, 1) > 0
      or not redis.call('ZSCORE', holders, token) then
    return nil
  end
  local wake = string.sub(holders, 1, -8) .. 'wake:' .. head
  if not cfg.fair then
    if (tonumber(st[#cfg.release_fields]) or 0) < now + cfg.idle then
      return nil  -- the keys must outlive the release by the idle period: release.lua records a later expiry
    end
    -- The removal first, as without a line (fast_release): it may empty the holders' key.
    redis.call('ZREM', holders, token)
    fast_set_state(state, cfg, st, left, 'hold_avg', hold_avg, 'seen_at', now_text)
    fast_forget(keys, token, kept_in)
    if redis.pcall('EXISTS', wake) == 0 then
      redis.pcall('RPUSH', wake, 'W')
      redis.pcall('PEXPIRE', wake, cfg.waiter_ttl * 2)
    end
    return 1
  end
  -- The head's request (common.lua's qweight): "weight|lease_ms|claim_ms|hold_ms|ticket|nonce|metadata".
  local weight, lease, claim, hold, _, nonce, meta =
    string.match(redis.call('HGET', qweight, head) or '', '^(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|([^|]*)|(.*)$')
  if weight ~= '1' or #lease > 12 or #claim > 12 or #hold > 12 then
    return nil
  end
  claim, hold = tonumber(claim), tonumber(hold)
  -- On a claim of the waiter's own TTL (common.lua's waiter_ttl: half its claim).
  local deadline, hold_text = fast_deadline(now, math.min(tonumber(lease), math.max(math.floor(claim / 2), 1)), hold)
  if deadline - now < cfg.waiter_ttl or (tonumber(st[#cfg.release_fields]) or 0) < deadline + cfg.idle then
    return nil  -- serve_line alerts the next head; or the keys must outlive the grant: release.lua sees to both
  end
  local _, fence_text = fast_fence(fence, clock)
  local deadline_text = string.format('%d', deadline)
  redis.call('ZADD', holders, deadline_text, head)
  fast_record(info, state, cfg, st, left + 1, head,
              '1|' .. now_text .. '|' .. fence_text .. '|' .. nonce .. '|' .. hold_text .. '|' .. meta,
              fast_folded(head, nonce), st[#cfg.release_fields], 'fence', fence_text, 'hold_avg', hold_avg,
              'seen_at', now_text)
  redis.call('ZREM', holders, token)
  fast_forget(keys, token, kept_in)
  redis.call('ZREM', queue, head)
  redis.call('ZREM', alive, head)
  redis.call('HDEL', qweight, head)
  redis.pcall('DEL', wake)
  redis.pcall('RPUSH', wake, 'G|' .. fence_text .. '|' .. deadline_text .. '|' .. now_text)
  redis.pcall('PEXPIRE', wake, claim)
  return 1
end

-- Writes without a line: the holder's removal first (it decides: 0 means it was not held, and nothing
-- was written), then the state hash and the holder's record. Nothing touches the holders' key after the
-- removal that may empty it, and a call cut short after it leaves `used` too high, never too low
-- (common.lua's ABORT-SAFE WRITES).
local function fast_release(keys, args)
  local cfg = type(args[1]) == 'string' and fast_config(args[1])
  local token, nonce, fence = args[2], args[3] or '', args[4] or ''
  if not cfg or type(token) ~= 'string' then
    return nil
  end
  local holders, state = keys[1], keys[3]
  local now, now_text, clock = fast_now()
  if redis.call('ZCOUNT', holders, '-inf', now_text) > 0 then
    return nil  -- a lease to reclaim (this one, perhaps)
  end
  -- The line's head, when there is a line: most releases find none, and EXISTS is cheaper than a ZRANGE.
  local head = redis.call('EXISTS', keys[4]) == 1 and redis.call('ZRANGE', keys[4], 0, 0)[1]
  -- Its record first: in the state hash, read with it (common.lua's `folded`), or else in info.
  local fields = cfg.release_read
  fields[#cfg.release_fields + 1] = '#' .. token
  local st = redis.call('HMGET', state, unpack(fields))
  local record, kept_in = st[#fields], state
  if not record then
    record, kept_in = redis.call('HGET', keys[2], token), keys[2]
  end
  local weight, acquired, held_fence, held_nonce = string.match(record or '', '^(%d+)|(%d+)|(%d+)|([^|]*)|%d+|')
  if not weight or (nonce ~= '' and held_nonce ~= nonce) or (fence ~= '' and held_fence ~= fence) then
    return nil  -- not held (release.lua counts the refusal), or not the grant named
  end
  local used = tonumber(st[1])
  if not st[2] or not used or used < 0 or used % 1 ~= 0 then
    return nil  -- its state lost, or a `used` to recount
  end
  if cfg.every > 0 and now - (tonumber(st[SAMPLED_AT]) or 0) >= cfg.every then
    return nil  -- a history sample is due
  end
  fields = cfg.release_fields
  local held_for = math.max(now - tonumber(acquired), 0)
  local hold_avg = tonumber(st[3]) or held_for
  hold_avg = fast_text(math.floor(hold_avg + (held_for - hold_avg) / 8))
  if head == token then
    return nil  -- the releaser is in line too (edited by hand, or a script cut short): serve_line keeps its grant
  elseif head then
    return fast_hand_on(keys, cfg, token, st, math.max(used - tonumber(weight), 0), hold_avg, now, now_text, clock,
                        head, kept_in)
  end
  if (tonumber(st[#fields]) or 0) < now + cfg.idle then
    return nil  -- the keys must outlive the release by the idle period: release.lua records a later expiry
  end
  -- The removal decides, as the first write: 0, and its record alone was left (release.lua counts the
  -- refusal), nothing written. It may empty the holders' key, which nothing touches after it; cut short
  -- here, the state keeps `used` too high, never too low (common.lua's ABORT-SAFE WRITES).
  if redis.call('ZREM', holders, token) == 0 then
    return nil
  end
  local left = math.max(used - tonumber(weight), 0)
  fast_set_state(state, cfg, st, left, 'hold_avg', hold_avg)
  fast_forget(keys, token, kept_in)
  return 1
end
