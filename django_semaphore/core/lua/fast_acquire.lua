-- The acquire's fast path: the common case in a few direct commands, without the prelude.
--
-- The common case: one permit (weight 1) of a fixed-limit semaphore (no adaptive rule) for a token that
-- holds none, nobody in line, no lease that ended waiting to be reclaimed, the state hash whole (a
-- fence, a sane `used`), a permit free under the limit in force, no history sample due, no tombstone
-- or note on the caller's wake list, the call in time, and the recorded expiry (`expires_at`) already
-- outliving the new lease by the idle period. Then the grant is exactly what acquire.lua would do: the holder
-- and its record, `used`, the fence, the `acquired` counter and the peak, one reply.
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
    string.match(args[2] or '', '^(%S+) 1 ([1-9]%d*) (%a+) ([1-9]%d*) (%d+) (%x*) (%d+) (%d+)$')
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
  local now, now_text = fast_now()
  if (not_after > 0 and now > not_after) or (grant_before > 0 and now > grant_before)
      or redis.call('EXISTS', keys[4], keys[8]) > 0 then
    return nil  -- too late, someone in line, or a note (a tombstone?) on the caller's wake list
  end
  local holders, info, state = keys[1], keys[2], keys[3]
  local st = redis.call('HMGET', state, unpack(cfg.acquire_fields))
  local fence, used = tonumber(st[3]), tonumber(st[2])
  if not fence then
    return nil  -- a new semaphore, or its state lost: acquire.lua seeds the fence and reports the loss
  end
  if st[2] and (not used or used < 0 or used % 1 ~= 0) then
    return nil  -- a `used` to recount
  end
  used = used or 0
  -- The earliest lease (as common.lua's read_holders reads it): ended, it is to be reclaimed; none,
  -- this call creates the holders' keys.
  local earliest = redis.call('ZRANGE', holders, 0, 0, 'WITHSCORES')[2]
  if earliest and tonumber(earliest) <= now then
    return nil  -- a lease to reclaim
  end
  local created = not earliest
  if created and used > 0 then
    return nil  -- nobody holds a permit, yet `used` says otherwise: acquire.lua recounts and reports
  end
  local limit = tonumber(st[1]) or cfg.limit
  if used + 1 > limit then
    return nil  -- full or paused: acquire.lua queues, refuses or audits
  end
  if cfg.every > 0 and now - (tonumber(st[6]) or 0) >= cfg.every then
    return nil  -- a history sample is due
  end
  local deadline = now + lease
  local hold_text = '0'
  if hold > 0 then
    if deadline > now + hold then
      deadline = now + hold
    end
    hold_text = string.format('%d', now + hold)
  end
  local recorded = tonumber(st[#cfg.acquire_fields])  -- `expires_at`
  if not recorded or recorded < deadline + cfg.idle then
    return nil  -- the keys must outlive the lease: acquire.lua records a later expiry and refreshes them
  end
  if redis.call('ZADD', holders, 'NX', string.format('%d', deadline), token) == 0 then
    return nil  -- this token holds a lease already: acquire.lua renews it
  end
  fence, used = fence + 1, used + 1
  local fence_text = string.format('%d', fence)
  redis.call('HSET', info, token, '1|' .. now_text .. '|' .. fence_text .. '|' .. nonce .. '|' .. hold_text .. '|'
             .. (args[3] or ''))
  fast_set_state(state, cfg, st, used, 'fence', fence_text, 'acquired', string.format('%d', (tonumber(st[4]) or 0) + 1))
  if created and not cfg.whole then
    -- The holders' keys were created by this call: they take the partition's recorded expiry.
    redis.call('PEXPIREAT', holders, recorded)
    redis.call('PEXPIREAT', info, recorded)
  end
  return {1, fence, deadline, used, limit, 0, now, 0}
end
