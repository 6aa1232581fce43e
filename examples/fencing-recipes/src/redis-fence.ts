/**
 * Fencing in Redis: the resource is a hash holding its data next to a `fence_token` field (the
 * highest token that wrote it), and every write goes through one Lua script, which Redis runs
 * atomically: compare, then write, with nothing in between. Keeping the token in the same hash
 * as the data also keeps both in one hash slot under Redis Cluster.
 */

/**
 * KEYS[1]: the resource's hash. ARGV[1]: the writer's fencing token (a decimal string).
 * ARGV[2..]: field, value pairs to write. Returns `{1, token}` when written, `{0, highest}` when
 * refused because a newer token has written.
 *
 * Tokens are compared as canonical decimal strings (longer is larger; equal lengths compare
 * lexicographically): Lua's numbers are doubles, exact only up to 2^53, and a token may be any
 * integer up to 2^63-1.
 */
export const FENCED_HSET_LUA = `
-- KEYS[1] = resource hash, ARGV[1] = token, ARGV[2..] = field, value, ...
local token = ARGV[1]
if not string.match(token, '^[1-9][0-9]*$') or #token > 19 then
  return redis.error_reply('ERR fencing token must be a positive decimal integer')
end
local highest = redis.call('HGET', KEYS[1], 'fence_token')
if highest and (#highest > #token or (#highest == #token and highest > token)) then
  return {0, highest} -- refused: a newer holder has written
end
redis.call('HSET', KEYS[1], 'fence_token', token, unpack(ARGV, 2))
return {1, token}
`;

/** The part of an ioredis client the recipe uses. */
export interface Evaluator {
  eval(script: string, numKeys: number, ...args: string[]): Promise<unknown>;
}

export interface FencedWriteResult {
  written: boolean;
  /** The token now stored: ours when written, the newer one that refused us otherwise. */
  highest: bigint;
}

/**
 * Writes `fields` into the hash `key` if `token` is not older than the newest token that wrote
 * it (an equal token is accepted: one holder writing many times).
 *
 * @example
 * const lease = await client.acquire('cart/7', { ttlMs: 5_000 });
 * const { written } = await fencedHset(redis, 'cart/7', lease.token, { items: '3' });
 */
export async function fencedHset(
  redis: Evaluator,
  key: string,
  token: bigint,
  fields: Record<string, string>,
): Promise<FencedWriteResult> {
  if (Object.hasOwn(fields, 'fence_token')) throw new Error('fence_token is the fence itself');
  const reply = (await redis.eval(
    FENCED_HSET_LUA,
    1,
    key,
    token.toString(),
    ...Object.entries(fields).flat(),
  )) as [number, string];
  return { written: reply[0] === 1, highest: BigInt(reply[1]) };
}
