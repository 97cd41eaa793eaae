-- Ferroute's shared resilience state: removes the fields of the hash P:state whose deadline has
-- passed (lockouts and session pins), so that the hash holds live state only, however many
-- locks and pins came and went. Each such field's deadline is its score in the sorted set
-- P:expiry (written beside the field; a field rewritten without one leaves the set). One
-- script, so that a field is never removed from one key and kept in the other.
--
-- ARGV: prefix P, now (Unix ms), limit (most fields removed by one call). Returns how many went.
local state, expiry = ARGV[1] .. ':state', ARGV[1] .. ':expiry'
local gone = redis.call('ZRANGEBYSCORE', expiry, '-inf', ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
if #gone > 0 then
  redis.call('HDEL', state, unpack(gone))
  redis.call('ZREM', expiry, unpack(gone))
end
return #gone
