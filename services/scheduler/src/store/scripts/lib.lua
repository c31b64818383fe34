-- Shared by the scheduler's scripts (prepended to each). ARGV[1] is the
-- request, one JSON object; `req.base` is the job's key prefix
-- (`<prefix>sched:<job>:`, see store/keys.rs). Replies are JSON too, decoded
-- into the types of store.rs. One Redis primary: keys derived here are not
-- declared in KEYS (no cluster slots).
local req = cjson.decode(ARGV[1])
-- A store that is not the one the scheduler's state is in (reset or
-- replaced: its generation marker changed or vanished) gets no write.
if req.generation and redis.call('GET', req.generation.key) ~= req.generation.id then
  return redis.error_reply('SLUICE_GENERATION the store does not hold generation ' .. req.generation.id)
end
local function k(name) return req.base .. name end

local function int(n) return string.format('%.0f', n) end

-- Adds or replaces record `rec` (a table) as `id`, then trims the history
-- to the newest `req.history.keep`, with the effect ledgers of the trimmed
-- records' ticks (never the open run's).
local function record(id, score, rec)
  redis.call('SET', k('run:' .. id), cjson.encode(rec), 'PX', req.history.ttl_ms)
  redis.call('ZADD', k('runs'), score, id)
  local excess = redis.call('ZCARD', k('runs')) - req.history.keep
  if excess > 0 then
    local open = redis.call('HGET', k('state'), 'open')
    local open_tick = open and cjson.decode(open).tick
    for _, old in ipairs(redis.call('ZRANGE', k('runs'), 0, excess - 1)) do
      redis.call('DEL', k('run:' .. old))
      local tick = string.match(old, '^(m?%d+)')
      if tick and tick ~= open_tick then redis.call('DEL', k('ledger:' .. tick)) end
    end
    redis.call('ZREMRANGEBYRANK', k('runs'), 0, excess - 1)
  end
end

-- Marks scheduled tick `ms` resolved (the marker only moves forward).
local function mark_done(ms)
  local done = tonumber(redis.call('HGET', k('state'), 'last_done_tick'))
  if not done or ms > done then redis.call('HSET', k('state'), 'last_done_tick', int(ms)) end
end

-- How many writes of tick `tick` (its name) the run holding `lease` applied.
local function applied_by(tick, lease)
  local ledger = redis.call('HMGET', k('ledger:' .. tick), 'run', 'writes')
  if ledger[1] == lease then return tonumber(ledger[2] or '0') end
  return 0
end

-- The run that took the lease and never recorded its end, once its lease
-- is gone: its record becomes `abandoned`, with the writes the tick's
-- ledger says it applied, and a tick with writes is resolved (its effect is
-- applied: nobody runs it again). Returns what it resolved, or nil.
local function resolve_open()
  local raw = redis.call('HGET', k('state'), 'open')
  if not raw or redis.call('EXISTS', k('running')) == 1 then return nil end
  local open = cjson.decode(raw)
  redis.call('HDEL', k('state'), 'open')
  local applied = applied_by(open.tick, open.lease)
  local raw_rec = redis.call('GET', k('run:' .. open.id))
  if raw_rec then
    local rec = cjson.decode(raw_rec)
    if rec.outcome == 'running' then
      rec.outcome = 'abandoned'
      rec.applied = applied
      rec.reason = applied > 0 and req.texts.abandoned_applied or req.texts.abandoned_none
      redis.call('SET', k('run:' .. open.id), cjson.encode(rec), 'KEEPTTL')
    end
  end
  if applied > 0 and not open.manual then mark_done(open.tick_ms) end
  return { tick_ms = open.tick_ms, manual = open.manual, owner = open.owner, token = open.token, applied = applied }
end

-- Takes the job's lease for tick `t` (from `req.tick`), with a new token:
-- the running record and the open marker are written in the same step.
-- The token is above every earlier one and never below the run's start
-- (the caller's clock, ms): a store that forgot the counter (restarted
-- empty, a stale replica) does not hand out an earlier token again.
local function take_lease(t, tick_key)
  local token = math.max((tonumber(redis.call('GET', k('fence'))) or 0) + 1, req.record.started_ms)
  redis.call('SET', k('fence'), int(token))
  local lease = req.owner .. ':' .. token
  redis.call('SET', k('running'), lease, 'PX', req.lease_ttl_ms)
  redis.call('SET', tick_key, lease, 'PX', req.claim_ttl_ms)
  local id = t.name .. '-' .. token
  local rec = req.record
  rec.token = token
  rec.outcome = 'running'
  record(id, t.ms, rec)
  local open = { id = id, lease = lease, tick = t.name, tick_ms = t.ms, manual = t.manual, owner = req.owner, token = token }
  redis.call('HSET', k('state'), 'open', cjson.encode(open))
  return token
end
