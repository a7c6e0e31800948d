-- Leave the waiting line (the caller's wait ran out, or it was interrupted), and serve whoever it
-- held up. A permit handed to the caller as it gave up goes back.
--
-- KEYS[1..7] the semaphore (see common.lua); KEYS[8] the caller's own wake list
-- ARGV[1] the semaphore's configuration (see common.lua)
-- ARGV[2] token of the waiter
-- ARGV[3] nonce of the call giving up: only a grant made for that call goes back
-- ARGV[4] '1' to leave a note on the caller's wake list, so that a wait still blocked on it
--         (Redis fires BLPOP timeouts on its own timer, late) returns at once; '2' to leave a
--         tombstone there instead ("C|<nonce>"): the call was interrupted, and its acquire, should
--         Redis run it after this (a hung server replaying what it buffered), is refused
--
-- Reply: {in_line (1 if the waiter was still in line, else 0), gave_back (1 if a grant went back)}
-- How long a tombstone waits for the acquire it refuses (which a resuming server runs at about
-- the time it runs this clean-up; past that, the grant of a later one ends with its lease anyway).
local TOMBSTONE_MS = 60000
local cfg = read_config(ARGV[1])
local token = token_arg(ARGV[2], 'token')
local nonce = ARGV[3] or ''

local now, now_text = server_now_ms()
local st, line, ctx = open_semaphore(cfg, now, now_text, token)
ctx.caller = nil  -- it leaves the line: whoever it held up is served, itself no more

local in_line = 0
if line.raw > 0 and redis.call('ZSCORE', K.queue, token) then
  in_line = 1
  leave_line(line, token)
elseif redis.call('HEXISTS', K.qweight, token) == 1 then
  -- Lapsed, keeping its ticket for a while: it is not coming back.
  drop('ZREM', K.alive, token)
  drop('HDEL', K.qweight, token)
end
local gave_back = 0
local score = redis.call('ZSCORE', K.holders, token)
if score and tonumber(score) > now then
  local info = parse_info(holder_record(token))
  if nonce ~= '' and info.nonce == nonce then
    drop_holder(token)
    ctx.used = math.max(ctx.used - info.weight, 0)
    gave_back = 1
  end
end
if ARGV[4] == '1' then
  add('RPUSH', K.own_wake, 'X')
  add('PEXPIRE', K.own_wake, cfg.waiter_ttl * 2)
elseif ARGV[4] == '2' and nonce ~= '' then
  add('RPUSH', K.own_wake, 'C|' .. nonce)
  add('PEXPIRE', K.own_wake, TOMBSTONE_MS)
else
  delete(K.own_wake)
end
serve_line(ctx, line, cfg)
sample(ctx, cfg, line.waiting)
settle(ctx)
commit(st, cfg, now)
return {in_line, gave_back}
