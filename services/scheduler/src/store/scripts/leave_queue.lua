-- LEAVE_QUEUE: gives up a queued place, only if it is still this one.
-- req: base, queued_value.
if redis.call('GET', k('queued')) == req.queued_value then redis.call('DEL', k('queued')) end
return cjson.encode(true)
