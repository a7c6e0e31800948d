-- An acquire of one permit with a line in the way, in its common cases: nobody in line missed a heartbeat
-- (common.lua's read_line would judge them), no lease ended, the state whole, no history sample or recount
-- due, no note on the caller's wake list, and the caller holding nothing. Then, as acquire.lua would:
-- - the semaphore full, a newcomer joins the line (its ticket, request and heartbeat) and a waiter
--   already in it stays (its heartbeat), both answered "queued" with their place;
-- - not fair, the caller takes the last free permit (whoever asks while a permit is free gets it: a
--   newcomer, or a waiter, which leaves the line), when its lease outlasts a waiter TTL (else acquire.lua
--   alerts the head of the line).
-- Anything else (a free permit in a fair line, which serve_line hands to its head; more than one permit
-- free; a lapsed waiter coming back; a refusal) returns nil, nothing written.
-- Writes, in common.lua's abort-safe order: additions (the holder and its record, or the line's entries),
-- the state hash, a new holders' keys' expiry, then a waiter's removal from the line.
local function fast_line_acquire(keys, cfg, token, lease, mode, claim, hold, nonce, now, now_text, clock, meta)
  local holders, info, state, queue, alive, qweight = keys[1], keys[2], keys[3], keys[4], keys[5], keys[6]
  if redis.call('EXISTS', keys[8]) > 0 or redis.call('ZSCORE', holders, token)
      or #redis.call('ZRANGEBYSCORE', alive, '-inf', now, 'LIMIT', 0, 1) > 0 then
    return nil
  end
  local st = redis.call('HMGET', state, unpack(LINE_FIELDS))
  local limit, used, fence = tonumber(st[1]) or cfg.limit, tonumber(st[2]), tonumber(st[3])
  local hold_avg, ticket, audited_at, recorded = st[6], st[7], st[8], st[9]
  local earliest = tonumber(redis.call('ZRANGE', holders, 0, 0, 'WITHSCORES')[2])
  if not fence or not used or used < 0 or used % 1 ~= 0 or (earliest and earliest <= now) or (not earliest and used > 0)
      or limit < 1 or (cfg.every > 0 and now - (tonumber(st[SAMPLED_AT]) or 0) >= cfg.every) then
    return nil  -- (nobody holds a permit, yet `used` says otherwise: acquire.lua recounts and reports)
  end
  local waiting = redis.call('ZCARD', queue)
  local rank = redis.call('ZRANK', queue, token)
  if used + 1 <= limit then
    if cfg.fair or used + 1 < limit then
      return nil
    end
    if rank and string.sub(redis.call('HGET', qweight, token) or '1|', 1, 2) ~= '1|' then
      return nil  -- in line with another weight: acquire.lua refuses it
    end
    local deadline, hold_text = fast_deadline(now, lease, hold)
    if deadline - now < cfg.waiter_ttl or (tonumber(recorded) or 0) < deadline + cfg.idle then
      return nil
    end
    local fence_text
    fence, fence_text = fast_fence(fence, clock)
    local deadline_text = string.format('%d', deadline)
    redis.call('ZADD', holders, deadline_text, token)
    fast_record(info, state, cfg, st, used + 1, token,
                '1|' .. now_text .. '|' .. fence_text .. '|' .. nonce .. '|' .. hold_text .. '|' .. meta,
                fast_folded(token, nonce), recorded, 'fence', fence_text, 'seen_at', now_text)
    if not earliest and not cfg.whole then
      -- The holders' key was created by this call: it takes the partition's recorded expiry.
      redis.call('PEXPIREAT', holders, recorded)
    end
    if rank then
      -- A waiter takes it from the line, which it leaves (removals last: nothing touches these keys after).
      redis.call('ZREM', queue, token)
      redis.call('ZREM', alive, token)
      redis.call('HDEL', qweight, token)
      waiting = waiting - 1
    end
    return fast_granted(fence_text, deadline_text, used + 1, limit, waiting, now_text)
  end
  if mode ~= 'wait' or now - (tonumber(audited_at) or 0) >= 1000
      or (tonumber(recorded) or 0) < now + cfg.waiter_ttl * 3 + cfg.idle then
    return nil  -- a refusal; a recount due (acquire.lua's audit); or the keys must outlive the place in line
  end
  local request = redis.call('HGET', qweight, token)
  local position
  if rank then
    if string.sub(request or '', 1, 2) ~= '1|' then
      return nil  -- in line with another weight, or its request gone
    end
    position = rank + 1
    redis.call('ZADD', alive, string.format('%d', now + cfg.waiter_ttl), token)
    fast_set_state(state, cfg, st, used, 'seen_at', now_text)
  else
    if request then
      return nil  -- a lapsed waiter coming back for its ticket
    end
    ticket = string.format('%d', (tonumber(ticket) or 0) + 1)
    waiting = waiting + 1
    position = waiting
    redis.call('ZADD', queue, ticket, token)
    redis.call('HSET', qweight, token, '1|' .. string.format('%d', lease) .. '|' .. claim .. '|' .. string.format('%d', hold)
               .. '|' .. ticket .. '|' .. nonce .. '|' .. meta)
    redis.call('ZADD', alive, string.format('%d', now + cfg.waiter_ttl), token)
    fast_set_state(state, cfg, st, used, 'ticket', ticket, 'seen_at', now_text)
  end
  -- When a permit is likely to come free: common.lua's expected_free_ms (full, so someone holds one).
  local nearest = math.max(earliest - now, 0)
  return {3, 0, 0, used, limit, waiting, now, position, nearest, math.min(nearest, tonumber(hold_avg) or cfg.waiter_ttl),
          '', 0}
end

-- The acquire's fast path: the common case in a few direct commands, without the prelude.
--
-- The common case: one permit (weight 1) of a fixed-limit semaphore (no adaptive rule) for a token that
-- holds none, nobody in line, no lease that ended waiting to be reclaimed, the state hash whole (a
-- fence, a sane `used`), a permit free under the limit in force, no history sample due, no tombstone
-- or note on the caller's wake list, the call in time, and the recorded expiry (`expires_at`) already
-- outliving the new lease by the idle period. Then the grant is exactly what acquire.lua would do: the holder
-- and its record, `used`, the fence and the peak, one reply.
--
-- Anything else, or any argument this code does not find in its plain form, returns nil having
-- written nothing, and the caller runs acquire.lua on the same call (in the same script or function,
-- so no extra round trip): every rare case, every refusal and every error keeps its one code path.
-- It takes KEYS and ARGV as acquire.lua does (see its header and common.lua's); it needs none of the
-- prelude, so that an EVALSHA script defines the prelude only when it falls through.
--
-- Writes, in common.lua's abort-safe order: ZADD NX first (it decides: 0 means the token holds a
-- lease, which acquire.lua renews; nothing was written), the holder's record, the state hash, then
-- a new partition's expiries.
local function fast_acquire(keys, args)
  local cfg = type(args[1]) == 'string' and fast_config(args[1])
  if not cfg then
    return nil
  end
  -- The request in its plain form (acquire.lua's header): weight 1, a hex nonce, the claim a whole
  -- number of ms from 1 to under ten years (as acquire.lua takes it, though only a waiter needs it).
  local token, lease, mode, claim, hold, nonce, not_after, grant_before =
    string.match(args[2] or '', '^(%S+) 1 ([1-9]%d*) (%a+) ([1-9]%d*) (%d+) (n?%x*) (%d+) (%d+)$')
  if not token or #token > 200 or (mode ~= 'try' and mode ~= 'wait') or #nonce > 64 or #lease > 11 or #claim > 11 then
    return nil
  end
  lease = tonumber(lease)
  hold = hold == '0' and 0 or tonumber(hold)
  not_after = not_after == '0' and 0 or tonumber(not_after)
  grant_before = grant_before == '0' and 0 or tonumber(grant_before)
  if hold > FAST_MAX_MS or not_after > FAST_MAX_AT or grant_before > FAST_MAX_AT then
    return nil
  end
  local now, now_text, clock = fast_now()
  if (not_after > 0 and now > not_after) or (grant_before > 0 and now > grant_before) then
    return nil  -- too late: acquire.lua refuses it
  end
  if redis.call('EXISTS', keys[4], keys[8]) > 0 then
    -- Someone in line, or a note (a tombstone?) on the caller's wake list.
    return fast_line_acquire(keys, cfg, token, lease, mode, claim, hold, nonce, now, now_text, clock, args[3] or '')
  end
  local holders, state = keys[1], keys[3]
  local st = redis.call('HMGET', state, unpack(cfg.acquire_fields))
  local fence, used = tonumber(st[3]), tonumber(st[2])
  if not fence then
    return nil  -- a new semaphore, or its state lost: acquire.lua seeds the fence and reports the loss
  end
  if st[2] and (not used or used < 0 or used % 1 ~= 0) then
    return nil  -- a `used` to recount
  end
  used = used or 0
  -- No holder: this call creates the holders' keys. Else a lease that ended (as common.lua's
  -- read_holders finds it) is to be reclaimed. (ZCARD and ZCOUNT reply integers: cheaper than reading
  -- the earliest lease's score as text, and without a holder one call.)
  local created = redis.call('ZCARD', holders) == 0
  if not created and redis.call('ZCOUNT', holders, '-inf', now_text) > 0 then
    return nil  -- a lease to reclaim
  end
  if created and used > 0 then
    return nil  -- nobody holds a permit, yet `used` says otherwise: acquire.lua recounts and reports
  end
  local limit = tonumber(st[1]) or cfg.limit
  if used + 1 > limit then
    return nil  -- full or paused: acquire.lua queues, refuses or audits
  end
  if cfg.every > 0 and now - (tonumber(st[SAMPLED_AT]) or 0) >= cfg.every then
    return nil  -- a history sample is due
  end
  local deadline, hold_text = fast_deadline(now, lease, hold)
  local recorded = tonumber(st[#cfg.acquire_fields])  -- `expires_at`
  if not recorded or recorded < deadline + cfg.idle then
    return nil  -- the keys must outlive the lease: acquire.lua records a later expiry and refreshes them
  end
  local deadline_text = string.format('%d', deadline)
  if redis.call('ZADD', holders, 'NX', deadline_text, token) == 0 then
    return nil  -- this token holds a lease already: acquire.lua renews it
  end
  local fence_text
  fence, fence_text = fast_fence(fence, clock)
  used = used + 1
  fast_record(keys[2], state, cfg, st, used, token,
              '1|' .. now_text .. '|' .. fence_text .. '|' .. nonce .. '|' .. hold_text .. '|' .. (args[3] or ''),
              fast_folded(token, nonce), recorded, 'fence', fence_text)
  if created and not cfg.whole then
    -- The holders' key was created by this call: it takes the partition's recorded expiry.
    redis.call('PEXPIREAT', holders, recorded)
  end
  return fast_granted(fence_text, deadline_text, used, limit, 0, now_text)
end
