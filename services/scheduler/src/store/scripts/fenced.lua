-- A job's fenced write, applied at most once per tick and write id. The
-- job's script body is wrapped as `body` (it sees only its own KEYS and ARGV).
-- KEYS: fence, lease, the tick's ledger, then the job's keys. ARGV[1]: JSON
-- {token, lease, id, ttl_ms}, then the job's arguments. Replies are written
-- by hand: cjson would print a large integer as 1e+14.
local w = cjson.decode(ARGV[1])
if w.generation and redis.call('GET', w.generation.key) ~= w.generation.id then
  return redis.error_reply('SLUICE_GENERATION the store does not hold generation ' .. w.generation.id)
end
local ledger = redis.call('HMGET', KEYS[3], 'run', 'w:' .. w.id)
-- Applied before by this run (a retry after a lost reply): its first reply,
-- even if the lease lapsed since.
if ledger[1] == w.lease and ledger[2] then return '{"already":' .. ledger[2] .. '}' end
if w.token < tonumber(redis.call('GET', KEYS[1]) or '0') then return '"superseded"' end
if redis.call('GET', KEYS[2]) ~= w.lease then return '"lease_lost"' end
if ledger[1] and ledger[1] ~= w.lease then return '"other_run"' end
local keys, args = {}, {}
for i = 4, #KEYS do keys[#keys + 1] = KEYS[i] end
for i = 2, #ARGV do args[#args + 1] = ARGV[i] end
-- Marked before the body runs: Redis keeps what a script wrote before an
-- error, so a body that fails half-way is still never applied again.
redis.call('HSET', KEYS[3], 'run', w.lease, 'w:' .. w.id, 0)
redis.call('HINCRBY', KEYS[3], 'writes', 1)
redis.call('PEXPIRE', KEYS[3], w.ttl_ms)
local reply = string.format('%.0f', tonumber(body(keys, args)) or 0)
redis.call('HSET', KEYS[3], 'w:' .. w.id, reply)
return '{"written":' .. reply .. '}'
