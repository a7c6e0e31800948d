-- ADAPTIVE LIMITS (part of the library's prelude, after common.lua; see docs/guides/adaptive-limits.md)
--
-- AIMD on hold time, decided by the server alone, so every process agrees on one limit. Holds are
-- summed per window (`window` ms of server clock); the first release after a window has run its
-- length decides once, then starts the next window:
--   * a lease lost in the window (a holder that timed out), or the window's average hold above the
--     target (without a target: above best * tolerance, best being the lowest window average seen,
--     drifting up BEST_DRIFT per window so it can follow a backend that became slower for good):
--     limit = max(min, floor(limit * backoff));
--   * else, if the window's peak use reached half the limit (the limit was exercised: a limit nobody
--     came near says nothing about what more load would do): limit = min(max, limit + 1);
--   * else it stays.
-- `best` is learnt from exercised windows only (a quiet spell says nothing about the backend under load)
-- and is at least BEST_FLOOR_MS. A window that starts in the server's future (a failover to a server
-- whose clock is behind) is started again from now.
-- An operator's override pins the limit in force: windows still roll (and `best` still learns) but
-- nothing changes, and nothing is left pending for when the override is cleared.

local BEST_DRIFT = 1.01
-- Holds are whole milliseconds: a window of instant holds averages 0, and a best of 0 would never drift
-- up (0 x 1.01), so best is at least this.
local BEST_FLOOR_MS = 1

-- The window's figures so far, with what this script already wrote (plan.state) winning.
local function window_value(st, name)
  return tonumber(plan.state[name] or st[name]) or 0
end

-- Start a new window now.
local function restart_window(ctx)
  set_state('ws', ctx.now)
  set_state('wsum', 0)
  set_state('wn', 0)
  set_state('wlost', 0)
  set_state('wpeak', ctx.used)
end

-- A hold of `held_ms` ended (a release): it counts in the current window.
local function record_hold(st, held_ms)
  set_state('wsum', window_value(st, 'wsum') + held_ms)
  set_state('wn', window_value(st, 'wn') + 1)
end

local function ms_text(value)
  return string.format('%dms', math.floor(value + 0.5))
end

-- Decide at the end of a window; returns {old, new, why} when the rule moved the limit, else nil.
-- `ctx.limit` follows the change, so the caller serves the line with a raised limit.
local function adapt(ctx, cfg)
  local a, st = cfg.adaptive, ctx.st
  local started = tonumber(st.ws)
  if started and started <= ctx.now and ctx.now - started < a.window then
    return nil
  end
  if not started or started > ctx.now then
    -- No window yet, or one that starts in this server's future (state written by a primary whose
    -- clock ran ahead, before a failover; a clock stepped back): waiting for it would freeze the rule.
    restart_window(ctx)
    return nil
  end
  local n, sum = window_value(st, 'wn'), window_value(st, 'wsum')
  local avg = n > 0 and sum / n or nil
  local best = tonumber(st.best)
  local old = adaptive_limit(st, a)
  local new, why = old, nil
  local bound, bound_name = a.target, 'target'
  if a.target == 0 then
    bound, bound_name = best and best * a.tolerance, 'best x ' .. tostring(a.tolerance)
  end
  local peak = math.max(window_value(st, 'wpeak'), ctx.used_before)
  if window_value(st, 'wlost') > 0 then
    new, why = math.max(a.min, math.floor(old * a.backoff)), 'lease lost'
  elseif avg and bound and avg > bound then
    new, why = math.max(a.min, math.floor(old * a.backoff)),
               'hold ' .. ms_text(avg) .. ' > ' .. bound_name .. ' ' .. ms_text(bound)
  elseif avg and peak * 2 >= old then
    new, why = math.min(a.max, old + 1), 'hold ' .. ms_text(avg) .. ' ok at peak ' .. peak .. '/' .. old
  end
  if avg and peak * 2 >= old then
    -- Learnt from exercised windows only: a quiet spell of health checks or cache hits says nothing
    -- about how fast the backend is under load, and would throttle the traffic that follows.
    best = math.max(best and math.min(avg, best * BEST_DRIFT) or avg, BEST_FLOOR_MS)
    set_state('best', string.format('%.3f', best))
  end
  restart_window(ctx)
  if tonumber(st.limit) or new == old then
    return nil  -- pinned by an operator's override, or nothing to change
  end
  set_state('alimit', new)
  set_state('alimit_at', ctx.now)
  set_state('alimit_why', why)
  set_state('alimit_old', old)
  set_state('alimit_by', ctx.decider or '')
  ctx.limit = new
  return {old, new, why}
end

-- The change a release decided, if `decider` (its "token|fence") is the one that made the last change:
-- a release retried after its reply was lost reports the change its first run made, so the signal is
-- still sent once.
local function change_made_by(st, decider)
  if decider == '' or field(st, 'alimit_by') ~= decider then
    return nil
  end
  local old, new = tonumber(field(st, 'alimit_old')), tonumber(st.alimit)
  if not old or not new then
    return nil
  end
  return {old, new, field(st, 'alimit_why') or ''}
end
