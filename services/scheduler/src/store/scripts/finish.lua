-- FINISH: the end of a run, with its final record written in the same step
-- (so a reader never sees the lease gone while the record still says
-- running). The record's `applied` comes from the tick's ledger. Fenced by
-- token: a run that a newer run superseded marks nothing and, if it thought
-- it succeeded, is recorded as lost_claim. A run whose lease lapsed while no
-- newer run started completed every write it made (each was checked), so
-- its end is marked as usual. Safe to retry after a lost reply.
-- req: base, tick {ms, manual, name}, tick_key, lease, token, id, record
-- (the run's final record), keep_ms, history, texts.
local t, rec = req.tick, req.record
local applied = applied_by(t.name, req.lease)
local previous = redis.call('GET', k('run:' .. req.id))
if previous then
  local p = cjson.decode(previous)
  if p.outcome ~= 'running' and p.outcome ~= 'abandoned' then
    return cjson.encode({ outcome = p.outcome, applied = applied })
  end
end
rec.applied = applied
local newest = tonumber(redis.call('GET', k('fence')) or '0')
if req.token < newest then
  if rec.outcome == 'succeeded' then rec.outcome, rec.reason = 'lost_claim', req.texts.superseded end
  record(req.id, t.ms, rec)
  return cjson.encode({ outcome = rec.outcome, applied = applied })
end
if redis.call('GET', k('running')) == req.lease then redis.call('DEL', k('running')) end
local open = redis.call('HGET', k('state'), 'open')
if open and cjson.decode(open).lease == req.lease then redis.call('HDEL', k('state'), 'open') end
-- A cancelled run that applied nothing leaves the tick open for a takeover.
if rec.outcome ~= 'cancelled' or applied > 0 then
  if not t.manual then mark_done(t.ms) end
  redis.call('SET', req.tick_key, req.lease, 'PX', req.keep_ms)
end
if rec.outcome == 'succeeded' then redis.call('HSET', k('state'), 'last_success_ms', int(rec.ended_ms)) end
record(req.id, t.ms, rec)
return cjson.encode({ outcome = rec.outcome, applied = applied })
