-- CLAIM: one replica's attempt at a tick, with every record it implies
-- written in the same step (the missed ticks before it, the running, queued
-- or skipped record, a dead run found on the way), so a replica killed right
-- after claiming leaves nothing unrecorded.
-- req: base, tick {ms, manual, name}, tick_key, owner, observed_last?, gap?
-- and gap_id, claim_ttl_ms, lease_ttl_ms, intent ("run" | {skip = reason}),
-- buffer_one, queued_value, skip_detail, record (the base record), history, texts.
local t = req.tick
local st = redis.call('HMGET', k('state'), 'last_tick', 'last_done_tick', 'last_success_ms', 'paused')
local last, done, success = tonumber(st[1]), tonumber(st[2]), tonumber(st[3])
local resolved = nil
local function reply(outcome)
  return cjson.encode({ outcome = outcome, previous_tick = last, last_success_ms = success, resolved = resolved })
end

local takeover = false
local current = redis.call('GET', req.tick_key)
if current then
  -- Only the latest scheduled tick, unresolved, whose run or wait is dead,
  -- may be taken over; and only if its run applied nothing.
  if t.manual then return reply({ lost = 'held' }) end
  local mark = string.match(current, ':([^:]+)$')
  if (done and done >= t.ms) or mark == 's' then return reply({ lost = 'done' }) end
  if last and t.ms < last then return reply({ lost = 'superseded' }) end
  if string.sub(mark, 1, 1) == 'q' then
    if redis.call('GET', k('queued')) == current then return reply({ lost = 'held' }) end
    -- Its waiter died: its queued record ends here.
    local waiter = string.sub(current, 1, #current - #mark - 1)
    local id = t.name .. '-queued-' .. waiter
    local raw = redis.call('GET', k('run:' .. id))
    if raw then
      local rec = cjson.decode(raw)
      rec.outcome, rec.reason = 'abandoned', req.texts.abandoned_queued
      redis.call('SET', k('run:' .. id), cjson.encode(rec), 'KEEPTTL')
    end
  elseif redis.call('GET', k('running')) == current then
    return reply({ lost = 'held' })
  else
    resolved = resolve_open()
    if redis.call('HEXISTS', k('ledger:' .. t.name), 'run') == 1 then
      mark_done(t.ms)
      return reply({ lost = 'applied' })
    end
  end
  takeover = true
elseif not t.manual then
  if last and t.ms < last then return reply({ lost = 'superseded' }) end
  if last and t.ms == last and done and done >= t.ms then return reply({ lost = 'done' }) end
  -- The caller computed the missed ticks from the last tick it saw.
  if last ~= req.observed_last then return reply({ lost = 'retry' }) end
  -- The claim of a tick claimed before can be gone (evicted, a short history
  -- TTL): its ledger still says whether its effect was applied.
  if last == t.ms and redis.call('HEXISTS', k('ledger:' .. t.name), 'run') == 1 then
    resolved = resolve_open()
    mark_done(t.ms)
    return reply({ lost = 'applied' })
  end
end
if not t.manual and (not last or t.ms > last) then
  redis.call('HSET', k('state'), 'last_tick', t.name)
  if req.gap then record(req.gap_id, req.gap.tick_ms, req.gap) end
end
resolved = resolved or resolve_open()

local function skip(reason, outcome, detail)
  redis.call('SET', req.tick_key, req.owner .. ':s', 'PX', req.claim_ttl_ms)
  if not t.manual then mark_done(t.ms) end
  local rec = req.record
  rec.outcome, rec.reason, rec.ended_ms, rec.ticks, rec.last_tick_ms = outcome, detail, rec.started_ms, 1, t.ms
  record(t.name .. '-' .. outcome, t.ms, rec)
  return reply({ skipped = reason })
end
if st[4] == '1' then return skip('paused', 'skipped', req.texts.paused) end
if req.intent ~= 'run' then
  local reason = req.intent.skip
  return skip(reason, reason == 'late' and 'missed' or 'skipped', req.skip_detail)
end
if redis.call('EXISTS', k('running')) == 1 or redis.call('EXISTS', k('queued')) == 1 then
  if req.buffer_one and redis.call('SET', k('queued'), req.queued_value, 'NX', 'PX', req.lease_ttl_ms) then
    redis.call('SET', req.tick_key, req.queued_value, 'PX', req.claim_ttl_ms)
    local rec = req.record
    rec.outcome, rec.reason = 'queued', req.texts.queued
    record(t.name .. '-queued-' .. req.owner, t.ms, rec)
    return reply('queued')
  end
  return skip('overlap', 'skipped', req.texts.overlap)
end
if takeover then req.record.reason = req.texts.takeover end
local token = take_lease(t, req.tick_key)
return reply({ run = { token = token, takeover = takeover } })
