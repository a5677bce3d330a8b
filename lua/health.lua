-- health: what the server that holds a queue says of keeping it (see
-- `durability_warnings` in src/store/health.rs). Read-only.
--
-- KEYS[1] control HASH (unread: any key of the queue would do, it routes
--         the call to the queue's node)
--
-- Returns {aof_enabled, role, connected_replicas}.
local persistence = redis.call('INFO', 'persistence')
local replication = redis.call('INFO', 'replication')
return {
  tonumber(string.match(persistence, 'aof_enabled:(%d+)')) or 0,
  string.match(replication, 'role:(%a+)') or '',
  tonumber(string.match(replication, 'connected_slaves:(%d+)')) or 0,
}
