import { formatToken, type LockService, type LockState } from '@dlm/core';

/**
 * A held name as `lock.get` and the admin API tell it: the highest-token holder's owner, token
 * and lease left, the mode (and limit, when shared), and every holder ordered by token.
 */
export function heldState(state: LockState) {
  const holders = (state.holders ?? [state]).map((holder) => ({
    owner: holder.owner,
    token: formatToken(holder.token),
    ttlRemainingMs: Math.max(0, Math.ceil(holder.ttlRemainingMs)),
  }));
  const mode = state.mode ?? 'exclusive';
  return {
    name: state.name,
    held: true as const,
    owner: state.owner,
    token: formatToken(state.token),
    ttlRemainingMs: Math.max(0, Math.ceil(state.ttlRemainingMs)),
    mode,
    ...(mode === 'shared' && state.limit !== undefined ? { limit: state.limit } : {}),
    holders,
  };
}

/**
 * A name as `lock.get` and the admin API's `GET /v1/locks/{name}` tell it: held (`heldState`) or
 * free, with its waiters — the backend's queue's, across dlm servers, where it counts them, else
 * this server's (`waitersScope` says which) — and a free name's lock-delay left (an expiry or
 * revocation not long ago), when it has one.
 */
export async function lockView(service: LockService, name: string) {
  const [state, waiters] = await Promise.all([service.get(name), service.countWaiters(name)]);
  if (state) return Object.assign({}, heldState(state), { name, ...waiters });
  const lockDelayRemainingMs = await service.lockDelayOf(name);
  return {
    name,
    held: false as const,
    ...waiters,
    ...(lockDelayRemainingMs > 0 && { lockDelayRemainingMs }),
  };
}
