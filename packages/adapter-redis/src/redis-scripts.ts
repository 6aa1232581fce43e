import { createHash } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';

/**
 * The Lua scripts behind every primitive. Each runs atomically on the server, so a primitive is
 * one step: no read-then-write races. A lock key holds `<token> <keyHash>:<owner>` (the token is
 * digits and the hash base64url, so the first space and the first `:` split it; a lease granted
 * without a key hash, or by an older version, holds `<token>:<owner>`) with the lease as its PX
 * expiry; tokens travel as decimal strings so they stay exact. The key hash is compared in the
 * same script that releases, extends or refreshes the lease, and never leaves the scripts except
 * inside INSPECT/REVOKE's raw value (parsed and dropped in redis-node.ts). Event messages are
 * `<type> <hex name> <token> <owner>`.
 *
 * Tokens come from the server's clock: a grant's token is the larger of the server's `TIME` in
 * microseconds and the name's fence counter + 1, and the fence key keeps the last token for
 * the lease plus a retention margin (PX), then expires. Nothing per name outlives that, yet a
 * fresh counter still beats every earlier token: once the fence key has expired, the server's
 * clock has passed the last grant's time by the retention margin (Redis expires keys on the
 * same wall clock), so `TIME` alone is larger, unless the clock has since been set back by
 * more than the margin (the one assumption; see the README).
 *
 * Shared holders (`mode: 'shared'`) live beside the lock key, in the keys the scripts derive from
 * it (`…:holders`, `…:holder-ends`, `…:holder:<token>`; see SHARED): never at the same time as
 * an exclusive holder's lock key, so the exclusive path reads them only when the lock key is
 * absent, in the same script.
 *
 * The write scripts that a late arrival could make harmful (acquire, extend, revoke) take a deadline in
 * the server's own clock (see server-clock.ts) and do nothing once it has passed: a request
 * whose caller already gave up (timed out) cannot take a lock later, whether it was held up in
 * a stalled server's socket buffer or replayed by a client library after a reconnect.
 */

export interface LuaScript {
  readonly name: string;
  readonly source: string;
  readonly sha: string;
}

function script(name: string, body: string): LuaScript {
  const source = body.trim();
  return { name, source, sha: createHash('sha1').update(source).digest('hex') };
}

// Shared preamble: the server's time in ms, and the stale check against ARGV[deadline].
const NOW = `
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
`;

// The next token for KEYS[2] (the fence), kept for \`keepMs\`. Microseconds since 1970 stay
// below 2^53 until the year 2255, so Lua's doubles hold them exactly; %.0f prints all digits.
function nextToken(keepMs: string): string {
  return `
local fence = tonumber(redis.call('GET', KEYS[2]) or '0')
local micros = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local token = string.format('%.0f', math.max(fence + 1, micros))
redis.call('SET', KEYS[2], token, 'PX', ${keepMs})
`;
}

// Shared preamble: a lock value's token, key hash ('' when none) and owner, and its inverse.
const VALUE = `
local function parse(value)
  local sep = string.find(value, ':', 1, true)
  local head = string.sub(value, 1, sep - 1)
  local space = string.find(head, ' ', 1, true)
  if not space then return head, '', string.sub(value, sep + 1) end
  return string.sub(head, 1, space - 1), string.sub(head, space + 1), string.sub(value, sep + 1)
end
local function format(token, hash, owner)
  if hash == '' then return token .. ':' .. owner end
  return token .. ' ' .. hash .. ':' .. owner
end
`;

// Shared preamble (after NOW and VALUE): the name's shared holders, in keys next to KEYS[1]
// (`<tag>:lock`) in its hash slot, derived here rather than declared (see ACQUIRE on why a key
// that is often absent is not one of KEYS).
// - HOLDERS, a hash: token → `<key hash>:<owner>` (the hash '' when none), `=<key hash>:<owner>`
//   → token (the same owner's re-acquire, without a scan), and `limit`, the holders' limit;
// - HOLDER_ENDS, a sorted set: the tokens scored by their deadlines (server ms), which every
//   script checks: a holder past its deadline is dropped by whichever script sees it;
// - MARK .. token, one key per holder whose PX is that holder's lease: Redis expires it on its
//   own, and its keyspace `expired` notification names the token, so waiters and watchers hear
//   of each holder's end while nobody calls. A sorted set alone with one PEXPIRE at the earliest
//   deadline could not tell which holder ended, nor fire for the later ones; a marker per holder
//   can. A script that drops a holder whose marker Redis has not expired yet (the same ms)
//   deletes the marker and publishes the expiry itself, so each end is told exactly once: by
//   Redis (the marker expired, DEL finds nothing) or by the script (DEL removed it).
// HOLDERS and HOLDER_ENDS expire with the latest holder, so nothing is left once all have ended.
// DELAY is the name's lock-delay (see ACQUIRE_STEP): kept by an exclusive lease with a delay,
// its value that delay in ms, its PX the lease's end plus the delay. So an expiry starts the
// delay with no script running (the key outlives the lock key by the delay); a release deletes
// it; a revocation sets it to the delay from then; an extend moves it with the lease.
// CAP is an exclusive lease's cap on holding (see ACQUIRE_STEP): `<token> <cap>`, the cap in
// server ms, written with the grant and living a second past the cap. Only the lease with that
// token reads it (a later lease's grant overwrites it, or finds it another's), so it needs no
// clean-up on an expiry; a release or revocation deletes it. Every extend or refresh of the lease
// is clamped to it, so the lock key's PX never runs past the cap.
const SHARED = `
local base = string.sub(KEYS[1], 1, -5)
local DELAY = base .. 'delay'
local CAP = base .. 'cap'
local HOLDERS = base .. 'holders'
local HOLDER_ENDS = base .. 'holder-ends'
local MARK = base .. 'holder:'
local function ms(n) return string.format('%.0f', n) end
local function ownerOf(value)
  return string.sub(value, string.find(value, ':', 1, true) + 1)
end
local function hashOf(value)
  return string.sub(value, 1, string.find(value, ':', 1, true) - 1)
end
local function keepHolders()
  local last = redis.call('ZRANGE', HOLDER_ENDS, -1, -1, 'WITHSCORES')
  if not last[2] then
    redis.call('DEL', HOLDERS, HOLDER_ENDS)
    return
  end
  local left = math.max(1, tonumber(last[2]) - now)
  redis.call('PEXPIRE', HOLDERS, left)
  redis.call('PEXPIRE', HOLDER_ENDS, left)
end
-- The ms the lease \`token\` has left to its cap on holding; nil when it has none.
local function capLeft(token)
  local cap = redis.call('GET', CAP)
  if not cap then return nil end
  local space = string.find(cap, ' ', 1, true)
  if string.sub(cap, 1, space - 1) ~= token then return nil end
  return tonumber(string.sub(cap, space + 1)) - now
end
-- \`ms\`, no further than the lease \`token\`'s cap: the ms to set, and the ms left to the cap
-- (nil: none; 0 or less: the lease is at its cap, and over).
local function clamp(token, ms)
  local left = capLeft(token)
  if not left then return ms, nil end
  return math.min(ms, left), left
end
local function dropHolder(token, value)
  redis.call('ZREM', HOLDER_ENDS, token)
  if value then redis.call('HDEL', HOLDERS, token, '=' .. value) end
  return redis.call('DEL', MARK .. token)
end
local function dropExpired(channel, hex)
  local dead = redis.call('ZRANGEBYSCORE', HOLDER_ENDS, '-inf', ms(now))
  if not dead[1] then return end
  for _, token in ipairs(dead) do
    local value = redis.call('HGET', HOLDERS, token)
    if dropHolder(token, value) == 1 and channel ~= '' then
      redis.call('PUBLISH', channel, 'expired ' .. hex .. ' ' .. token .. ' ' .. (value and ownerOf(value) or ''))
    end
  end
  keepHolders()
end
`;

// Shared: the acquire step, either mode: core's grant rule (grant-rule.ts) in Lua, checked against
// its case table (test/grant-rule.test.ts). `waiting` (nil: nobody counts) says whether someone
// is queued for the name: then a free lock is not granted ({0, -1, now}), only the holder's own
// lease refreshed. `shared`: the request's mode; `limit`: its limit (shared only). From a queue's
// look (LOOK_AT): `ahead`, how many shared entries with its limit are ahead of the request;
// `blocking`, the entry that must go first (exclusive: the nearest; shared: the last exclusive
// one, or shared with another limit); `nearest`, the nearest entry ahead; `behind(entry)`, the
// reply that waits for an entry. In the rule's order: the requester's own holder (refreshed, or
// a mode conflict), the holders' limit (a conflict), the entry that must go first, the holders,
// the room the shared entries ahead take. KEYS and ARGV as ACQUIRE's (the queue scripts append
// theirs after them).
// `lockDelayMs`: the request's lock-delay (exclusive only), set by the script before it calls
// `acquire`. The name in its delay (no holder, DELAY alive) grants nobody: {0, ms left, now, 'd'}
// (core's rule 5: after the entries ahead and the room, before a grant).
const ACQUIRE_STEP = `
local lockDelayMs = 0
local maxHoldMs = 0
local function keepDelay(life)
  if lockDelayMs > 0 then redis.call('SET', DELAY, lockDelayMs, 'PX', life + lockDelayMs)
  else redis.call('DEL', DELAY) end
end
local function acquire(waiting, shared, limit, ahead, blocking, nearest, behind)
  if tonumber(ARGV[3]) > 0 and now > tonumber(ARGV[3]) then return {-1, 0, now} end
  local current = redis.call('GET', KEYS[1])
  if current then
    local held, hash, owner = parse(current)
    -- The same owner without the lease's key is another requester.
    if owner == ARGV[1] and hash == ARGV[6] then
      if shared then return {-2, 'mode', now} end
      -- The first grant's cap holds: refreshed up to it only.
      local life, left = clamp(held, tonumber(ARGV[2]))
      if not left or left > 0 then
        redis.call('PEXPIRE', KEYS[1], life)
        keepDelay(life)
        return {1, held, now, 0, 1, life, left or -1}
      end
    end
    if blocking then return behind(blocking) end
    return {0, redis.call('PTTL', KEYS[1]), now}
  end
  dropExpired(ARGV[4], ARGV[5])
  local count = redis.call('ZCARD', HOLDER_ENDS)
  local value = ARGV[6] .. ':' .. ARGV[1]
  if count > 0 then
    local mine = redis.call('HGET', HOLDERS, '=' .. value)
    if not shared then
      if mine then return {-2, 'mode', now} end
      if blocking then return behind(blocking) end
      -- Free once the last shared holder has gone.
      local last = redis.call('ZRANGE', HOLDER_ENDS, -1, -1, 'WITHSCORES')
      return {0, math.max(0, tonumber(last[2]) - now), now}
    end
    local agreed = tonumber(redis.call('HGET', HOLDERS, 'limit'))
    if agreed and agreed ~= limit then return {-2, 'limit', now, agreed} end
    if mine then
      redis.call('ZADD', HOLDER_ENDS, 'XX', ms(now + tonumber(ARGV[2])), mine)
      redis.call('PEXPIRE', MARK .. mine, ARGV[2])
      keepHolders()
      return {1, mine, now, 0, count}
    end
  end
  if blocking then return behind(blocking) end
  if shared and count + (ahead or 0) >= limit then
    -- The shared entries ahead take the next room first; with none, the soonest holder's end.
    if (ahead or 0) > 0 then return behind(nearest) end
    local first = redis.call('ZRANGE', HOLDER_ENDS, 0, 0, 'WITHSCORES')
    return {0, math.max(0, tonumber(first[2]) - now), now}
  end
  if waiting and waiting() then return {0, -1, now} end
  if count == 0 then
    local delayed = redis.call('PTTL', DELAY)
    if delayed > 0 then return {0, delayed, now, 'd'} end
  end
  ${nextToken('tonumber(ARGV[2]) + tonumber(ARGV[7])')}
  local life = tonumber(ARGV[8]) or tonumber(ARGV[2])
  -- Redlock asks the nodes for a little more than the lease: never past the cap.
  if maxHoldMs > 0 then life = math.min(life, maxHoldMs) end
  if shared then
    redis.call('HSET', HOLDERS, token, value, '=' .. value, token, 'limit', limit)
    redis.call('ZADD', HOLDER_ENDS, ms(now + life), token)
    redis.call('SET', MARK .. token, ARGV[1], 'PX', life)
    keepHolders()
    if ARGV[4] ~= '' then
      redis.call('PUBLISH', ARGV[4], 'shared ' .. ARGV[5] .. ' ' .. token .. ' ' .. (count + 1) .. ' ' .. ARGV[1])
    end
    return {1, token, now, 1, count + 1}
  end
  redis.call('SET', KEYS[1], format(token, ARGV[6], ARGV[1]), 'PX', life)
  if lockDelayMs > 0 then keepDelay(life) end
  if maxHoldMs > 0 then
    redis.call('SET', CAP, token .. ' ' .. ms(now + maxHoldMs), 'PX', maxHoldMs + 1000)
  end
  if ARGV[4] ~= '' then
    redis.call('PUBLISH', ARGV[4], 'acquired ' .. ARGV[5] .. ' ' .. token .. ' ' .. ARGV[1])
  end
  return {1, token, now, 1, 1}
end
`;

/**
 * KEYS: lock, fence. ARGV: owner, ttlMs, deadline (server ms; 0 = none), channel ('' = do not
 * publish), hex name, key hash ('' = none), fence retention ms (the fence key lives ttlMs + this),
 * a fresh lease's own ms ('' = ttlMs: Redlock's first step takes the nodes for less, until its
 * second step labels the grant, so a dead attempt's copies run out soon), and the name's queue
 * ends key ('' or absent = no fair queue; see QUEUE_JOIN), the mode ('s' = shared, else
 * exclusive), the limit (shared), the lock-delay (ms; absent = 0) and the cap on holding (ms;
 * absent = 0, none; exclusive only).
 * Returns {1, token, now, fresh(1|0), holders} granted (a refresh of a lease adds the ms it was
 * refreshed for, clamped to its cap, and the ms left to its cap, -1 for none); {0, ms, now} held by others (the ms until
 * the holder whose end would let the request in ends); {0, ms, now, 'd'} free but in its
 * lock-delay for ms more; {0, -1, now} free but someone is queued
 * (no barging past a live entry); {-2, 'mode' | 'limit', now, their limit} the request can never
 * be granted as asked while they hold it; {-1, 0, now} stale.
 *
 * The queue ends key is an argument, not one of KEYS, though it is in the name's slot: Redis
 * Cluster answers TRYAGAIN to a script whose declared keys are split by a slot migration (some
 * moved, some never made), so declaring a key that usually does not exist would fail every
 * acquire of a held name while its slot moves. Read only when the lock is free, it is checked by
 * Redis like any command of the script (same slot, local).
 */
export const ACQUIRE = script(
  'acquire',
  `${NOW}${VALUE}${SHARED}${ACQUIRE_STEP}
local ends = ARGV[9]
local shared = ARGV[10] == 's'
local limit = tonumber(ARGV[11])
lockDelayMs = tonumber(ARGV[12]) or 0
maxHoldMs = tonumber(ARGV[13]) or 0
if not ends or ends == '' then return acquire(nil, shared, limit) end
return acquire(function()
  return redis.call('ZCOUNT', ends, '(' .. string.format('%.0f', now), '+inf') > 0
end, shared, limit)
`,
);

// Shared by the queue scripts. KEYS[3]: the entries (a sorted set of entry ids, scored by the
// name's sequence), KEYS[4]: their ends (the same ids, scored by when each stops counting, in
// server ms), KEYS[5]: the sequence. An entry's departure is published on `channel` as
// `left <hex name> <its sequence> <id>` (the ARGV that hold the channel and the hex name).
const KEEP = `
-- The queue's keys last as long as its last entry, so a queue whose servers all died goes.
local function keep()
  local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
  if not last[2] then
    redis.call('DEL', KEYS[3], KEYS[5])
    return
  end
  local ms = math.max(1, tonumber(last[2]) - now)
  for i = 3, 5 do redis.call('PEXPIRE', KEYS[i], ms) end
end
`;

const queueSteps = (channel: string, hex: string) => `
${KEEP}
local function depart(id)
  local place = redis.call('ZSCORE', KEYS[3], id)
  redis.call('ZREM', KEYS[3], id)
  redis.call('ZREM', KEYS[4], id)
  if place and ${channel} ~= '' then
    redis.call('PUBLISH', ${channel}, 'left ' .. ${hex} .. ' ' .. place .. ' ' .. id)
  end
  return place
end
-- Entries whose server stopped renewing them no longer count; a bounded number go per call.
local function purge()
  local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', string.format('%.0f', now), 'LIMIT', 0, 64)
  for _, id in ipairs(dead) do depart(id) end
end
local function ends(id)
  local at = redis.call('ZSCORE', KEYS[4], id)
  if not at then return -1 end
  return math.max(0, tonumber(at) - now)
end
`;

// Shared by QUEUE_JOIN and QUEUE_LOOK: one look at entry `id` with core's grant rule (ACQUIRE's
// step, given what is ahead of the entry). An entry's id ends in its mode and limit: `.x`
// exclusive, `.s<limit>` shared (`.s` alone, from an older server: shared with any limit).
// Granted: the entry goes in the same script.
const LOOK_AT = `
local function sameLimit(entry, limit)
  local digits = string.match(entry, '%.s(%d*)$')
  if not digits then return false end
  return digits == '' or tonumber(digits) == limit
end
local function behind(entry) return {2, entry, ends(entry), -1, now} end
local function lookAt(id, shared, limit)
  local mine = redis.call('ZSCORE', KEYS[3], id)
  if not mine then return {3, now} end
  local ahead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. mine)
  local nearest = ahead[#ahead]
  local blocking, sharedAhead = nil, 0
  if shared then
    for _, other in ipairs(ahead) do
      if sameLimit(other, limit) then sharedAhead = sharedAhead + 1 else blocking = other end
    end
  else
    blocking = nearest
  end
  local reply = acquire(nil, shared, limit, sharedAhead, blocking, nearest, behind)
  if reply[1] == 1 then
    depart(id)
    keep()
    return reply
  end
  if reply[1] ~= 0 then return reply end
  return {2, '', -1, reply[2], now, reply[4] or ''}
end
`;

/**
 * KEYS: lock, fence, entries, ends, sequence. ARGV: ACQUIRE's eight, then the entry's id (ending
 * in `.s<limit>` for a shared request, `.x` for an exclusive one), how long it counts without renewal
 * (ms), the mode ('s' shared), the limit, the lock-delay and the cap on holding (ms; absent =
 * 0). Grants at once when the name has room and nobody is
 * queued (or it is the owner's own lease); else queues the entry last and looks (LOOK_AT).
 * Returns ACQUIRE's replies, or {2, id waited on ('' = none), its ms left, holder ms (-1), now,
 * 'd' when that ms is the name's lock-delay}.
 */
export const QUEUE_JOIN = script(
  'queue-join',
  `${NOW}${VALUE}${SHARED}${ACQUIRE_STEP}${queueSteps('ARGV[4]', 'ARGV[5]')}${LOOK_AT}
if tonumber(ARGV[3]) > 0 and now > tonumber(ARGV[3]) then return {-1, 0, now} end
purge()
local shared = ARGV[11] == 's'
local limit = tonumber(ARGV[12])
lockDelayMs = tonumber(ARGV[13]) or 0
maxHoldMs = tonumber(ARGV[14]) or 0
local reply = acquire(function() return redis.call('ZCARD', KEYS[3]) > 0 end, shared, limit)
if reply[1] ~= 0 then return reply end
redis.call('ZADD', KEYS[3], redis.call('INCR', KEYS[5]), ARGV[9])
redis.call('ZADD', KEYS[4], string.format('%.0f', now + tonumber(ARGV[10])), ARGV[9])
keep()
return lookAt(ARGV[9], shared, limit)
`,
);

/**
 * KEYS and ARGV: QUEUE_JOIN's. When the entry may be granted (LOOK_AT), grants it (ACQUIRE's
 * step) and removes the entry, in this one script.
 * Returns ACQUIRE's replies; {2, id waited on ('' = none), its ms left, holder ms (-1), now}; or
 * {3, now} when the entry is gone (it stopped counting: others may have passed it).
 */
export const QUEUE_LOOK = script(
  'queue-look',
  `${NOW}${VALUE}${SHARED}${ACQUIRE_STEP}${queueSteps('ARGV[4]', 'ARGV[5]')}${LOOK_AT}
if tonumber(ARGV[3]) > 0 and now > tonumber(ARGV[3]) then return {-1, 0, now} end
purge()
lockDelayMs = tonumber(ARGV[13]) or 0
maxHoldMs = tonumber(ARGV[14]) or 0
return lookAt(ARGV[9], ARGV[11] == 's', tonumber(ARGV[12]))
`,
);

/**
 * KEYS: lock, fence, entries, ends, sequence. ARGV: the entry's id, channel, hex name.
 * Returns 1 when the entry was there.
 */
export const QUEUE_LEAVE = script(
  'queue-leave',
  `${NOW}${queueSteps('ARGV[2]', 'ARGV[3]')}
local place = depart(ARGV[1])
keep()
if place then return 1 end
return 0
`,
);

/**
 * KEYS: lock, fence, entries, ends, sequence. ARGV: how long the entries count from now (ms), then
 * the ids of this server's entries. An entry that already stopped counting is not brought back:
 * waiters behind it may have passed it. Returns the ids renewed.
 */
export const QUEUE_RENEW = script(
  'queue-renew',
  `${NOW}${KEEP}
local renewed = {}
for i = 2, #ARGV do
  local at = redis.call('ZSCORE', KEYS[4], ARGV[i])
  if at and tonumber(at) > now then
    redis.call('ZADD', KEYS[4], 'XX', string.format('%.0f', now + tonumber(ARGV[1])), ARGV[i])
    renewed[#renewed + 1] = ARGV[i]
  end
end
keep()
return renewed
`,
);

/**
 * KEYS: lock, fence, entries, ends, sequence. ARGV: an entry's id ('' = none). Read only: the
 * entries that still count (their end is ahead on this server's clock), all of them, or those up
 * to and including the entry's own (its 1-based place; 0 when it no longer counts).
 */
export const QUEUE_PLACE = script(
  'queue-place',
  `${NOW}
local live = string.format('(%.0f', now)
if ARGV[1] == '' then return redis.call('ZCOUNT', KEYS[4], live, '+inf') end
local mine = redis.call('ZSCORE', KEYS[3], ARGV[1])
local myEnd = redis.call('ZSCORE', KEYS[4], ARGV[1])
if not mine or not myEnd or tonumber(myEnd) <= now then return 0 end
local place = 0
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', mine)) do
  local at = redis.call('ZSCORE', KEYS[4], id)
  if at and tonumber(at) > now then place = place + 1 end
end
return place
`,
);

/**
 * KEYS: lock. ARGV: token, channel, hex name, key hash ('-' = token only: an operator's call).
 * Returns 1 when released, 0 when `token` (and the key hash) do not hold the lock. An exclusive
 * holder's release reads nothing else; a shared one's touches that holder only.
 */
export const RELEASE = script(
  'release',
  `${NOW}${VALUE}${SHARED}
local current = redis.call('GET', KEYS[1])
if current then
  local held, hash, owner = parse(current)
  if held ~= ARGV[1] or (ARGV[4] ~= '-' and hash ~= ARGV[4]) then return 0 end
  -- A release ends the lease with no lock-delay (and its cap with it).
  redis.call('DEL', KEYS[1], DELAY, CAP)
  if ARGV[2] ~= '' then
    redis.call('PUBLISH', ARGV[2], 'released ' .. ARGV[3] .. ' ' .. ARGV[1] .. ' ' .. owner)
  end
  return 1
end
dropExpired(ARGV[2], ARGV[3])
local value = redis.call('HGET', HOLDERS, ARGV[1])
if not value or (ARGV[4] ~= '-' and hashOf(value) ~= ARGV[4]) then return 0 end
dropHolder(ARGV[1], value)
keepHolders()
if ARGV[2] ~= '' then
  redis.call('PUBLISH', ARGV[2], 'released ' .. ARGV[3] .. ' ' .. ARGV[1] .. ' ' .. ownerOf(value))
end
return 1
`,
);

/**
 * KEYS: lock. ARGV: token, ttlMs, deadline, key hash ('-' = token only), channel, hex name.
 * Returns {1, owner, now, ms extended for (clamped to the cap on holding), ms left to the cap (-1:
 * none)} extended; {0, '', now} when `token` (and the key hash) do not hold the lock, or the lease
 * is at its cap; {-1, '', now} stale.
 */
export const EXTEND = script(
  'extend',
  `${NOW}${VALUE}${SHARED}
if tonumber(ARGV[3]) > 0 and now > tonumber(ARGV[3]) then return {-1, '', now} end
local current = redis.call('GET', KEYS[1])
if current then
  local held, hash, owner = parse(current)
  if held ~= ARGV[1] or (ARGV[4] ~= '-' and hash ~= ARGV[4]) then return {0, '', now} end
  local life, left = clamp(held, tonumber(ARGV[2]))
  if left and left <= 0 then return {0, '', now} end
  redis.call('PEXPIRE', KEYS[1], life)
  local delay = redis.call('GET', DELAY)
  if delay then redis.call('SET', DELAY, delay, 'PX', life + tonumber(delay)) end
  return {1, owner, now, life, left or -1}
end
dropExpired(ARGV[5] or '', ARGV[6] or '')
local value = redis.call('HGET', HOLDERS, ARGV[1])
if not value or (ARGV[4] ~= '-' and hashOf(value) ~= ARGV[4]) then return {0, '', now} end
redis.call('ZADD', HOLDER_ENDS, 'XX', ms(now + tonumber(ARGV[2])), ARGV[1])
redis.call('PEXPIRE', MARK .. ARGV[1], ARGV[2])
keepHolders()
return {1, ownerOf(value), now}
`,
);

/**
 * KEYS: lock. Returns {value, pttl} for an exclusive holder; {'s', limit, then token, owner, ms
 * left per shared holder, in no order}; {} when free. Read only: holders past their deadline
 * are left out, not dropped.
 */
export const INSPECT = script(
  'inspect',
  `${NOW}${SHARED}
local current = redis.call('GET', KEYS[1])
if current then return {current, redis.call('PTTL', KEYS[1])} end
local live = redis.call('ZRANGEBYSCORE', HOLDER_ENDS, '(' .. ms(now), '+inf', 'WITHSCORES')
if not live[1] then return {} end
local reply = {'s', redis.call('HGET', HOLDERS, 'limit') or '0'}
for i = 1, #live, 2 do
  local value = redis.call('HGET', HOLDERS, live[i])
  reply[#reply + 1] = live[i]
  reply[#reply + 1] = value and ownerOf(value) or ''
  reply[#reply + 1] = math.max(0, tonumber(live[i + 1]) - now)
end
return reply
`,
);

/**
 * KEYS: lock. How long the name's lock-delay has left (ms; 0 when none, and while held).
 */
export const LOCK_DELAY = script(
  'lock-delay',
  `${NOW}${SHARED}
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
return math.max(0, redis.call('PTTL', DELAY))
`,
);

/**
 * KEYS: lock. ARGV: channel, hex name, deadline. Ends every lease of the name (each shared
 * holder's with its own `revoked`). Returns {1, `<token>:<owner>` of the (highest) lease it
 * ended} when it ended any, {0} when free, {-1} stale (a late revoke would end whatever lease
 * holds the lock by then).
 */
export const REVOKE = script(
  'revoke',
  `${NOW}${VALUE}${SHARED}
if tonumber(ARGV[3]) > 0 and now > tonumber(ARGV[3]) then return {-1} end
local current = redis.call('GET', KEYS[1])
if current then
  redis.call('DEL', KEYS[1], CAP)
  -- A revocation starts the lease's lock-delay now.
  local delay = redis.call('GET', DELAY)
  if delay then redis.call('SET', DELAY, delay, 'PX', delay) end
  local held, hash, owner = parse(current)
  if ARGV[1] ~= '' then
    redis.call('PUBLISH', ARGV[1], 'revoked ' .. ARGV[2] .. ' ' .. held .. ' ' .. owner)
  end
  return {1, held .. ':' .. owner}
end
dropExpired(ARGV[1], ARGV[2])
local tokens = redis.call('ZRANGE', HOLDER_ENDS, 0, -1)
if not tokens[1] then return {0} end
local highest, last = -1, ''
for _, token in ipairs(tokens) do
  local value = redis.call('HGET', HOLDERS, token)
  local owner = value and ownerOf(value) or ''
  redis.call('DEL', MARK .. token)
  if ARGV[1] ~= '' then
    redis.call('PUBLISH', ARGV[1], 'revoked ' .. ARGV[2] .. ' ' .. token .. ' ' .. owner)
  end
  if tonumber(token) > highest then highest, last = tonumber(token), token .. ':' .. owner end
end
redis.call('DEL', HOLDERS, HOLDER_ENDS)
return {1, last}
`,
);

/**
 * Redlock's second step on each node after a quorum grant with token M (the largest of the
 * nodes' counters): raise the node's counter to at least M, so the next grant anywhere starts
 * above it, and relabel this owner's lease on the node with M, so release/extend/re-acquire
 * speak one token on every node. KEYS: lock, fence. ARGV: owner, M, channel ('' = do not
 * publish), hex name, key hash ('' = none), how long the fence key lives (ms: the lease + the
 * retention margin), the lease's ms from now ('' = keep its time to live). Returns 1 when the
 * owner's lease is on this node.
 */
export const ADOPT_TOKEN = script(
  'adopt-token',
  `${NOW}${VALUE}${SHARED}
local fence = redis.call('GET', KEYS[2])
if (not fence) or tonumber(fence) < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[6])
end
local current = redis.call('GET', KEYS[1])
if not current then
  -- A shared holder: the owner's entry, relabelled with M in every key it is in.
  local value = ARGV[5] .. ':' .. ARGV[1]
  local held = redis.call('HGET', HOLDERS, '=' .. value)
  if not held then return 0 end
  if held ~= ARGV[2] then
    local score = redis.call('ZSCORE', HOLDER_ENDS, held)
    redis.call('HDEL', HOLDERS, held)
    redis.call('HSET', HOLDERS, ARGV[2], value, '=' .. value, ARGV[2])
    redis.call('ZREM', HOLDER_ENDS, held)
    if score then redis.call('ZADD', HOLDER_ENDS, score, ARGV[2]) end
    if redis.call('EXISTS', MARK .. held) == 1 then redis.call('RENAME', MARK .. held, MARK .. ARGV[2]) end
  end
  if tonumber(ARGV[7]) then
    redis.call('ZADD', HOLDER_ENDS, ms(now + tonumber(ARGV[7])), ARGV[2])
    redis.call('PEXPIRE', MARK .. ARGV[2], ARGV[7])
  end
  keepHolders()
  if ARGV[3] ~= '' then
    local count = redis.call('ZCARD', HOLDER_ENDS)
    redis.call('PUBLISH', ARGV[3], 'shared ' .. ARGV[4] .. ' ' .. ARGV[2] .. ' ' .. count .. ' ' .. ARGV[1])
  end
  return 1
end
local held, hash, owner = parse(current)
if owner ~= ARGV[1] or hash ~= ARGV[5] then return 0 end
-- The lease's cap on holding goes with it to its new token, and bounds its new end.
local life, left = clamp(held, tonumber(ARGV[7]) or 0)
if left and held ~= ARGV[2] then
  redis.call('SET', CAP, ARGV[2] .. ' ' .. ms(now + left), 'KEEPTTL')
end
if tonumber(ARGV[7]) and life > 0 then
  redis.call('SET', KEYS[1], format(ARGV[2], hash, owner), 'PX', life)
  -- The lease's lock-delay starts at its new end.
  local delay = redis.call('GET', DELAY)
  if delay then redis.call('SET', DELAY, delay, 'PX', life + tonumber(delay)) end
elseif held ~= ARGV[2] then
  redis.call('SET', KEYS[1], format(ARGV[2], hash, owner), 'KEEPTTL')
end
if ARGV[3] ~= '' then
  redis.call('PUBLISH', ARGV[3], 'acquired ' .. ARGV[4] .. ' ' .. ARGV[2] .. ' ' .. ARGV[1])
end
return 1
`,
);

export const ALL_SCRIPTS: readonly LuaScript[] = [
  ACQUIRE,
  RELEASE,
  EXTEND,
  INSPECT,
  REVOKE,
  ADOPT_TOKEN,
  QUEUE_JOIN,
  QUEUE_LOOK,
  QUEUE_LEAVE,
  QUEUE_RENEW,
  QUEUE_PLACE,
  LOCK_DELAY,
];

/**
 * Loads every script into the server's cache, ahead of any command on a new connection, so
 * that EVALSHA finds them. The NOSCRIPT fallback in `runScript` would work too, but it sends
 * the EVAL only after the NOSCRIPT reply, behind commands issued meanwhile, and Redlock relies
 * on a connection's commands running in the order they were issued.
 */
export function loadScripts(client: Redis | Cluster): void {
  for (const lua of ALL_SCRIPTS) client.script('LOAD', lua.source).catch(() => {});
}

function isNoScript(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith('NOSCRIPT');
}

/**
 * EVALSHA, and EVAL when the server does not know the script yet (after a restart). A NOSCRIPT
 * reply means nothing ran, so sending the source is safe; no other error is retried, and
 * nothing is sent again once the caller has given up (`abandoned`).
 */
export async function runScript(
  client: Redis | Cluster,
  lua: LuaScript,
  keys: readonly string[],
  args: ReadonlyArray<string | number>,
  abandoned: () => boolean = () => false,
): Promise<unknown> {
  try {
    return await client.evalsha(lua.sha, keys.length, ...keys, ...args);
  } catch (error) {
    if (!isNoScript(error) || abandoned()) throw error;
    return client.eval(lua.source, keys.length, ...keys, ...args);
  }
}
