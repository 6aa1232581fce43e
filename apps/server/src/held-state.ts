import { formatToken, type LockState } from '@dlm/core';

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
