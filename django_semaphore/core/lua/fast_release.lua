-- The release's fast path: the common case in a few direct commands, without the prelude.
--
-- The common case: a fixed-limit semaphore (no adaptive rule) whose holder `token` gives back a lease
-- that has not ended (the grant named by the nonce or fence, when the caller names one), nobody in
-- line, no other lease that ended waiting to be reclaimed, the state hash whole (a fence, a sane
-- `used`), no history sample due, and the recorded expiry (`expires_at`) outliving the release by
-- the idle period. Then the release is exactly what release.lua would do: `used`, the hold average,
-- the `released` counter and the peak, the holder's removal, reply 1.
--
-- Anything else returns nil having written nothing, and the caller runs release.lua on the same
-- call (in the same script or function: no extra round trip). It takes KEYS and ARGV as release.lua
-- does, and needs none of the prelude, only fast.lua.
--
-- Writes: the holder's removal first (it decides: 0 means it was not held, and nothing was written),
-- then the state hash and the holder's record. Nothing touches the holders' key after the removal that
-- may empty it, and a call cut short after it leaves `used` too high, never too low (common.lua's
-- ABORT-SAFE WRITES).
local function fast_release(keys, args)
  local cfg = type(args[1]) == 'string' and fast_config(args[1])
  local token, nonce, fence = args[2], args[3] or '', args[4] or ''
  if not cfg or type(token) ~= 'string' then
    return nil
  end
  local holders, info, state = keys[1], keys[2], keys[3]
  local now = fast_now()
  local earliest = redis.call('ZRANGE', holders, 0, 0, 'WITHSCORES')[2]
  if not earliest or tonumber(earliest) <= now or redis.call('EXISTS', keys[4]) > 0 then
    return nil  -- nothing held, a lease to reclaim (this one, perhaps), or a line to serve
  end
  local weight, acquired, held_fence, held_nonce =
    string.match(redis.call('HGET', info, token) or '', '^(%d+)|(%d+)|(%d+)|([^|]*)|%d+|')
  if not weight or (nonce ~= '' and held_nonce ~= nonce) or (fence ~= '' and held_fence ~= fence) then
    return nil  -- not held (release.lua counts the refusal), or not the grant named
  end
  local fields = cfg.release_fields
  local st = redis.call('HMGET', state, unpack(fields))
  local used = tonumber(st[1])
  if not st[2] or not used or used < 0 or used % 1 ~= 0 then
    return nil  -- its state lost, or a `used` to recount
  end
  if cfg.every > 0 and now - (tonumber(st[6]) or 0) >= cfg.every then
    return nil  -- a history sample is due
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
  local held_for = math.max(now - tonumber(acquired), 0)
  local hold_avg = tonumber(st[3]) or held_for
  hold_avg = string.format('%d', math.floor(hold_avg + (held_for - hold_avg) / 8))
  local released = string.format('%d', (tonumber(st[4]) or 0) + 1)
  fast_set_state(state, cfg, st, left, 'hold_avg', hold_avg, 'released', released)
  redis.call('HDEL', info, token)
  return 1
end
