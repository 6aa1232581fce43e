import {
  type AcquireRequest,
  type AcquireResult,
  aheadOf,
  type BackendCapabilities,
  DlmError,
  decideGrant,
  type GrantDecision,
  type HolderProof,
  holdersOf,
  type LockBackend,
  type LockState,
  type RuleRequest,
} from '@dlm/core';
import { memoryQueue } from './memory-queue.js';
import type { Holder, MemoryStore } from './memory-store.js';

/**
 * A backend of one's own, written by the steps of the repository's CONTRIBUTING.md ("Add a
 * backend"): the primitives here, each one step on the store (`memory-store.ts`, standing in for
 * a real service); who may be granted decided by core's grant rule; a queue driver
 * (`memory-queue.ts`) so that waiters on several dlm servers are served in order; the
 * conformance suite in `test/conformance.test.ts`. Core does everything else.
 */
export function memoryBackend(store: MemoryStore): LockBackend {
  let closed = false;
  const open = () => {
    if (closed) throw new DlmError('UNAVAILABLE', 'the memory backend is closed');
  };
  const queue = memoryQueue(store, () => closed);
  return {
    kind: 'memory',
    capabilities,
    queue: queue.queue,
    async tryAcquire(request) {
      open();
      // A try-lock is granted exactly when a request queued now would be at once.
      return acquire(store, request, store.state(request.name).queue).result;
    },
    async release(proof) {
      open();
      const holder = holderOf(store, proof);
      if (holder) store.end(proof.name, holder, 'released');
      return holder !== undefined;
    },
    async extend({ ttlMs, ...proof }) {
      open();
      const holder = holderOf(store, proof);
      // At its cap on holding the lease is over (its end was the cap).
      if (!holder || (holder.capAt ?? Number.POSITIVE_INFINITY) <= Date.now()) return null;
      const ms = store.renew(proof.name, holder, ttlMs);
      return { name: proof.name, owner: holder.owner, token: holder.token, ttlMs: ms };
    },
    async inspect(name) {
      open();
      return stateOf(name, store.state(name).holders);
    },
    watch(name, listener) {
      return store.listen(name, (event) => {
        if ('lock' in event) listener(event.lock);
      });
    },
    // On the store's own event channel, as its other events: every server sharing it hears it.
    async requestRelease(name, reason) {
      open();
      store.ask(name, reason);
    },
    async lockDelayOf(name) {
      open();
      return store.state(name).holders.length > 0 ? 0 : Math.ceil(store.delayLeft(name));
    },
    async revoke(name) {
      open();
      const ended = [...store.state(name).holders];
      for (const holder of ended) store.end(name, holder, 'revoked');
      return ended.length > 0;
    },
    async close() {
      closed = true;
      await queue.close();
    },
  };
}

const capabilities: BackendCapabilities = {
  fencing: 'strict',
  minTtlMs: 1,
  ttlGranularityMs: 1,
  durableAcrossRestart: false,
  fairQueue: true,
  expiryEvents: true,
  sharedModes: true,
  lockDelay: true,
  maxHold: true,
};

export function ruleOf(request: AcquireRequest): RuleRequest {
  return request.mode === 'shared'
    ? { mode: 'shared', limit: request.limit ?? 1 }
    : { mode: 'exclusive', limit: 1 };
}

/** Core's grant rule over the name's holders and the entries ahead; grants or refreshes. */
export function acquire(
  store: MemoryStore,
  request: AcquireRequest,
  ahead: readonly RuleRequest[],
): { result: AcquireResult; decision: GrantDecision } {
  const { name, owner, keyHash, ttlMs } = request;
  const rule = ruleOf(request);
  const { holders } = store.state(name);
  // The same owner without the lease's key is another requester.
  const own = holders.find((holder) => holder.owner === owner && holder.keyHash === keyHash);
  const listed = holders.map((holder) => ({ ...holder, own: holder === own }));
  const delayLeft = holders.length === 0 ? Math.ceil(store.delayLeft(name)) : 0;
  const decision = decideGrant(rule, holdersOf(listed, delayLeft), aheadOf(rule, ahead));
  if (decision.kind === 'conflict') {
    return { decision, result: { granted: false, conflict: decision.conflict } };
  }
  if (decision.kind === 'wait' && decision.on === 'delay') {
    const left = { ttlRemainingMs: delayLeft, lockDelayRemainingMs: delayLeft };
    return { decision, result: { granted: false, ...left } };
  }
  if (decision.kind === 'wait') {
    const ends = holders.map((holder) => holder.endsAt - Date.now());
    const end = decision.on === 'holder' && decision.end === 'soonest' ? Math.min : Math.max;
    const result: AcquireResult = ends.length
      ? { granted: false, ttlRemainingMs: end(...ends) }
      : { granted: false };
    return { decision, result };
  }
  const lockDelayMs = request.lockDelayMs ?? 0;
  // The cap on holding is set with the grant; a refresh keeps the first grant's.
  const cap = request.maxHoldMs === undefined ? {} : { capAt: Date.now() + request.maxHoldMs };
  const holder =
    decision.kind === 'refresh'
      ? own!
      : store.grant(name, { owner, keyHash, ...rule, lockDelayMs, ...cap }, ttlMs);
  let grantedMs = ttlMs;
  if (decision.kind === 'refresh') {
    holder.lockDelayMs = lockDelayMs;
    grantedMs = store.renew(name, holder, ttlMs);
  }
  return {
    decision,
    result: { granted: true, grant: { name, owner, token: holder.token, ttlMs: grantedMs } },
  };
}

/** The holder a release or extend names: its token, and its key hash when one is given. */
function holderOf(store: MemoryStore, { name, token, keyHash }: HolderProof): Holder | undefined {
  return store
    .state(name)
    .holders.find(
      (holder) => holder.token === token && (keyHash === undefined || holder.keyHash === keyHash),
    );
}

function stateOf(name: string, holders: readonly Holder[]): LockState | null {
  const top = holders.at(-1);
  if (!top) return null;
  const left = (holder: Holder) => Math.max(1, holder.endsAt - Date.now());
  return {
    name,
    owner: top.owner,
    token: top.token,
    ttlRemainingMs: left(top),
    mode: top.mode,
    ...(top.mode === 'shared' ? { limit: top.limit } : {}),
    holders: holders.map((holder) => ({
      owner: holder.owner,
      token: holder.token,
      ttlRemainingMs: left(holder),
    })),
  };
}
