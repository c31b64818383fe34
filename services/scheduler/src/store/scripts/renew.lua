-- RENEW: extends a run's lease and its tick's claim, only while the lease
-- is still this run's. req: base, tick_key, lease, lease_ttl_ms, claim_ttl_ms.
if redis.call('GET', k('running')) ~= req.lease then return cjson.encode(false) end
redis.call('PEXPIRE', k('running'), req.lease_ttl_ms)
if redis.call('GET', req.tick_key) == req.lease then redis.call('PEXPIRE', req.tick_key, req.claim_ttl_ms) end
return cjson.encode(true)
