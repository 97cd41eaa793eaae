-- Ferroute's OAuth tokens shared by replicas (`[state] backend = "redis"`). One script serves
-- every operation, so each runs atomically on the server: at most one replica at a time holds
-- the claim to refresh an account (with a fencing token), the tokens it got are accepted only
-- from the claim's holder and only as the next generation, and a claim that lapsed before its
-- holder published, or whose holder lost the token endpoint's answer, leaves the refresh token
-- "in doubt" (it may have been presented and rotated): no replica presents it again, and only
-- the holder's publication (a late answer) or a new sign-in ends the doubt.
--
-- ARGV: op, prefix, now (Unix ms), connection, then the op's own.
-- One hash per connection, P:oauth:<connection>:
--   gen, origin, blob, issued, expires, last   the tokens (blob sealed by the replicas' key)
--   refused                                    the generation whose refresh token was refused
--   fence                                      the last fencing token handed out
--   cfence, cowner, cexp, cgen                 the claim: its fence, holder, deadline, and the
--                                              generation it refreshes ('' once settled)
local op, P, now, conn = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local K = P .. ':oauth:' .. conn

local function tokens(word)
  local f = redis.call('HMGET', K, 'gen', 'origin', 'blob', 'issued', 'expires', 'last', 'refused')
  return { word, f[1], f[2], f[3], f[4], f[5], f[6] or '', f[7] or '' }
end

local function write(gen, origin, blob, issued, expires, last)
  redis.call('HSET', K, 'gen', gen, 'origin', origin, 'blob', blob, 'issued', issued, 'expires', expires,
    'last', last, 'refused', '', 'cfence', '', 'cgen', '', 'cexp', '', 'cowner', '')
end

local gen = redis.call('HGET', K, 'gen')

if op == 'read' then
  if not gen then return { 'none' } end
  return tokens('tokens')

elseif op == 'seed' then
  -- ARGV[5..10]: origin, gen, blob, issued, expires, last. The store wins for the same sign-in
  -- unless the seed is further along; a different sign-in replaces it only when it expires
  -- later (a newer sign-in) or the stored one was refused.
  local origin, g, expires = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[9])
  if not gen then
    write(ARGV[6], origin, ARGV[7], ARGV[8], ARGV[9], ARGV[10])
  else
    local sgen = tonumber(gen)
    local sorigin = redis.call('HGET', K, 'origin')
    if sorigin == origin then
      if g > sgen then write(ARGV[6], origin, ARGV[7], ARGV[8], ARGV[9], ARGV[10]) end
    elseif expires > tonumber(redis.call('HGET', K, 'expires')) or redis.call('HGET', K, 'refused') == gen then
      write(string.format('%.0f', math.max(g, sgen + 1)), origin, ARGV[7], ARGV[8], ARGV[9], ARGV[10])
    end
  end
  return tokens('tokens')

elseif op == 'claim' then
  -- ARGV[5..7]: owner, the generation the caller holds, ttl (ms).
  local owner, from, ttl = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
  if not gen then return { 'none' } end
  local sgen = tonumber(gen)
  if sgen > from then return tokens('newer') end
  if sgen < from then return { 'behind', gen } end
  if redis.call('HGET', K, 'refused') == gen then return { 'refused', gen } end
  local cgen, cexp = redis.call('HGET', K, 'cgen'), tonumber(redis.call('HGET', K, 'cexp')) or 0
  local doubt = cgen == gen
  if doubt and cexp > now then return { 'busy', string.format('%.0f', cexp) } end
  if doubt then return { 'doubt', string.format('%.0f', cexp) } end
  local fence = redis.call('HINCRBY', K, 'fence', 1)
  redis.call('HSET', K, 'cfence', fence, 'cowner', owner, 'cexp', string.format('%.0f', now + ttl), 'cgen', gen)
  return { 'granted', tostring(fence) }

elseif op == 'publish' then
  -- ARGV[5..10]: fence, gen, blob, issued, expires, last. Only the last claim's holder, and
  -- only the generation after the stored one.
  if not gen then return { 'stale', 'nothing is stored' } end
  if redis.call('HGET', K, 'cfence') ~= ARGV[5] then return { 'stale', 'another replica claimed the refresh' } end
  if tonumber(ARGV[6]) ~= tonumber(gen) + 1 then return { 'stale', 'generation ' .. gen .. ' is stored' } end
  write(ARGV[6], redis.call('HGET', K, 'origin'), ARGV[7], ARGV[8], ARGV[9], ARGV[10])
  return { 'published' }

elseif op == 'doubt' then
  -- ARGV[5]: fence. The claim's holder lost the token endpoint's answer: the claim lapses now,
  -- unpublished, so the refresh token is in doubt at once (the holder may still publish).
  if not gen or redis.call('HGET', K, 'cfence') ~= ARGV[5] or redis.call('HGET', K, 'cgen') ~= gen then
    return { 'kept' }
  end
  redis.call('HSET', K, 'cexp', string.format('%.0f', now))
  return { 'doubted' }

elseif op == 'release' or op == 'refuse' then
  -- ARGV[5]: fence. `release`: the claim's holder got no tokens and the refresh token is not in
  -- doubt; `refuse`: the token endpoint refused it.
  if not gen or redis.call('HGET', K, 'cfence') ~= ARGV[5] or redis.call('HGET', K, 'cgen') ~= gen then
    return { 'kept' }
  end
  redis.call('HSET', K, 'cgen', '', 'cexp', '', 'cowner', '')
  if op == 'refuse' then redis.call('HSET', K, 'refused', gen) end
  return { op == 'refuse' and 'refused' or 'released' }
end
return redis.error_reply('unknown token operation ' .. tostring(op))
