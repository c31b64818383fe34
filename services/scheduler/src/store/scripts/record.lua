-- RECORD: adds or replaces one record. req: base, id, score, record, history.
record(req.id, req.score, req.record)
return cjson.encode(true)
