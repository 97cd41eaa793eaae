-- Ferroute's exclusive leases (M14) held in Redis. One script serves every operation, so each
-- runs atomically on the server whichever replica sends it: one active lease per owner and one
-- per connection hold across all replicas, and a lapsed lease is reclaimed by whoever touches
-- it first.
--
-- ARGV: op, prefix, now (Unix ms), retain (ms an ended lease stays readable), then the op's own.
-- Keys under the prefix P:
--   P:lease:<owner>:<generation>  hash key, conn, model, state, acq, ren, exp
--   P:lease-owner:<owner>         the generation of the owner's active lease
--   P:lease-conn:<connection>     "<owner>:<generation>" of the lease holding the connection
--   P:lease-gen:<owner>           the owner's last generation
--   P:lease-active                set of "<owner>:<generation>" of active leases
-- Owners are SHA-256 hex digests, so they never contain ':'.
local op, P, now, retain = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local ACTIVE = P .. ':lease-active'

local function rec(o, g) return P .. ':lease:' .. o .. ':' .. g end
local function owner_ptr(o) return P .. ':lease-owner:' .. o end
local function conn_ptr(c) return P .. ':lease-conn:' .. c end
local function ms(x) return string.format('%.0f', x) end

-- Ends an active lease as `state`, freeing its owner and its connection.
local function finish(o, g, state)
  local k = rec(o, g)
  redis.call('HSET', k, 'state', state)
  if state ~= 'EXPIRED' then redis.call('HSET', k, 'ren', ARGV[3]) end
  local c = redis.call('HGET', k, 'conn')
  if redis.call('GET', owner_ptr(o)) == g then redis.call('DEL', owner_ptr(o)) end
  if c and redis.call('GET', conn_ptr(c)) == o .. ':' .. g then redis.call('DEL', conn_ptr(c)) end
  redis.call('SREM', ACTIVE, o .. ':' .. g)
  redis.call('PEXPIRE', k, retain)
end

-- The state of a lease now (false when there is none); a lapsed one is reclaimed first.
local function state(o, g)
  local k = rec(o, g)
  local s = redis.call('HGET', k, 'state')
  if s == 'ACTIVE' and tonumber(redis.call('HGET', k, 'exp')) <= now then
    finish(o, g, 'EXPIRED')
    s = 'EXPIRED'
  end
  return s
end

local function pack(o, g)
  local f = redis.call('HMGET', rec(o, g), 'key', 'conn', 'model', 'state', 'acq', 'ren', 'exp')
  return { 'lease', g, f[1], f[2], f[3], f[4], f[5], f[6], f[7] }
end

local function split(member) return string.match(member, '^(.*):(%d+)$') end

if op == 'acquire' then
  -- ARGV[5..8]: owner, key id, model, ttl (ms); ARGV[9..]: eligible connections in routing order.
  local o, key, model, ttl = ARGV[5], ARGV[6], ARGV[7], tonumber(ARGV[8])
  local own = redis.call('GET', owner_ptr(o))
  if own then
    if state(o, own) == 'ACTIVE' then
      local f = redis.call('HMGET', rec(o, own), 'key', 'conn')
      for i = 9, #ARGV do
        if f[1] == key and f[2] == ARGV[i] then return pack(o, own) end
      end
      return { 'busy' }
    end
    if redis.call('GET', owner_ptr(o)) == own then redis.call('DEL', owner_ptr(o)) end
  end
  local soonest = false
  for i = 9, #ARGV do
    local c = ARGV[i]
    local h = redis.call('GET', conn_ptr(c))
    local held = false
    if h then
      local ho, hg = split(h)
      if ho and state(ho, hg) == 'ACTIVE' then
        held = true
        local exp = tonumber(redis.call('HGET', rec(ho, hg), 'exp'))
        if not soonest or exp < soonest then soonest = exp end
      elseif redis.call('GET', conn_ptr(c)) == h then
        redis.call('DEL', conn_ptr(c))
      end
    end
    if not held then
      local g = tostring(redis.call('INCR', P .. ':lease-gen:' .. o))
      redis.call('HSET', rec(o, g), 'key', key, 'conn', c, 'model', model, 'state', 'ACTIVE',
        'acq', ARGV[3], 'ren', ARGV[3], 'exp', ms(now + ttl))
      redis.call('SET', owner_ptr(o), g)
      redis.call('SET', conn_ptr(c), o .. ':' .. g)
      redis.call('SADD', ACTIVE, o .. ':' .. g)
      return pack(o, g)
    end
  end
  return { 'full', soonest and ms(soonest) or '', tostring(#ARGV - 8) }
elseif op == 'invalidate' then
  -- ARGV[5..6]: owner, generation. Whether this call ended an active lease.
  local o, g = ARGV[5], ARGV[6]
  if state(o, g) == 'ACTIVE' then
    finish(o, g, 'INVALIDATED')
    return { 'ended' }
  end
  return { 'kept' }
elseif op == 'lease' or op == 'renew' or op == 'release' then
  -- ARGV[5..6]: owner, generation; renew: ARGV[7] the ttl (ms).
  local o, g = ARGV[5], ARGV[6]
  local s = state(o, g)
  if not s then return { 'none' } end
  if s == 'ACTIVE' then
    if op == 'renew' then
      redis.call('HSET', rec(o, g), 'ren', ARGV[3], 'exp', ms(now + tonumber(ARGV[7])))
    elseif op == 'release' then
      finish(o, g, 'RELEASED')
    end
  end
  return pack(o, g)
elseif op == 'active' then
  -- Every active lease as owner, generation, key id, connection (lapsed ones reclaimed).
  local out = { 'active' }
  for _, m in ipairs(redis.call('SMEMBERS', ACTIVE)) do
    local o, g = split(m)
    if o and state(o, g) == 'ACTIVE' then
      local f = redis.call('HMGET', rec(o, g), 'key', 'conn')
      out[#out + 1] = o
      out[#out + 1] = g
      out[#out + 1] = f[1]
      out[#out + 1] = f[2]
    else
      redis.call('SREM', ACTIVE, m)
    end
  end
  return out
end
return redis.error_reply('unknown lease operation ' .. tostring(op))
