-- START_QUEUED: a tick waiting behind the running one (buffer-one) starts
-- once the lease is free, keeps its place while it is not, and is recorded
-- as skipped if the job was paused meanwhile.
-- req: base, tick {ms, manual, name}, tick_key, owner, queued_value,
-- claim_ttl_ms, lease_ttl_ms, record (the base record), history, texts.
local t = req.tick
local current = redis.call('GET', req.tick_key)
-- Already started (a retry after a lost reply): the same token again.
if current and current == redis.call('GET', k('running')) and string.sub(current, 1, #req.owner + 1) == req.owner .. ':' then
  local token = tonumber(string.sub(current, #req.owner + 2))
  if token then return cjson.encode({ started = { token = token } }) end
end
if redis.call('GET', k('queued')) ~= req.queued_value or current ~= req.queued_value then
  return cjson.encode('lost')
end
local queued_id = t.name .. '-queued-' .. req.owner
if redis.call('HGET', k('state'), 'paused') == '1' then
  redis.call('DEL', k('queued'))
  redis.call('SET', req.tick_key, req.owner .. ':s', 'PX', req.claim_ttl_ms)
  if not t.manual then mark_done(t.ms) end
  redis.call('ZREM', k('runs'), queued_id)
  redis.call('DEL', k('run:' .. queued_id))
  local rec = req.record
  rec.outcome, rec.reason, rec.ended_ms, rec.ticks, rec.last_tick_ms =
    'skipped', req.texts.paused_while_queued, rec.started_ms, 1, t.ms
  record(t.name .. '-skipped', t.ms, rec)
  return cjson.encode('paused')
end
if redis.call('EXISTS', k('running')) == 1 then
  redis.call('PEXPIRE', k('queued'), req.lease_ttl_ms)
  redis.call('PEXPIRE', req.tick_key, req.claim_ttl_ms)
  return cjson.encode('waiting')
end
local resolved = resolve_open()
redis.call('DEL', k('queued'))
redis.call('ZREM', k('runs'), queued_id)
redis.call('DEL', k('run:' .. queued_id))
local token = take_lease(t, req.tick_key)
return cjson.encode({ started = { token = token, resolved = resolved } })
