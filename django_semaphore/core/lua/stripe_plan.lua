-- Record a limit change of a striped semaphore before its stripes apply it (stripe_limit.lua), in the
-- name's own slot, and give it the next generation: the stripes keep the latest generation they applied,
-- and whoever finds one behind this record (a status read; core/stripe_limits.py) applies it again, so a
-- change whose process died half-way is finished, never left half-applied.
--
-- KEYS[1] the plan, a HASH: gen (the last change's generation), action ('set' or 'clear'), value (the
--         site-wide limit a 'set' put in force)
-- ARGV[1] 'set' (ARGV[2] is the new limit), 'add' (ARGV[2] is added to the limit in force, and may be
--         negative; the result stays within 0 and the maximum) or 'clear' (back to the limit in settings)
-- ARGV[2] the number for 'set' and 'add'
-- ARGV[3] for 'add' without a 'set' in force: the limit in force now, as the caller read it from the
--         stripes (the settings' limit, or the sum of the stripes' adaptive rules)
--
-- Reply: {generation, action, value} of the change now recorded (value 0 for 'clear').
local op = ARGV[1]
local plan_key = KEYS[1]
local found = redis.call('HMGET', plan_key, 'gen', 'action', 'value')
local generation = (tonumber(found[1]) or 0) + 1
local action, value = 'set', 0
if op == 'set' then
  value = int_arg(ARGV[2], 'limit', 0, MAX_LIMIT)
elseif op == 'add' then
  local change = int_arg(ARGV[2], 'change', -MAX_LIMIT, MAX_LIMIT)
  local current = tonumber(found[3])
  if found[2] ~= 'set' or not current then
    current = int_arg(ARGV[3], 'limit in force', 0, MAX_LIMIT)
  end
  value = math.max(0, math.min(MAX_LIMIT, current + change))
elseif op == 'clear' then
  action = 'clear'
else
  fail("operation must be 'set', 'add' or 'clear'")
end
redis.call('HSET', plan_key, 'gen', generation, 'action', action, 'value', value)
return {generation, action, value}
