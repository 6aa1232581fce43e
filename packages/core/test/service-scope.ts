import { afterEach, expect } from 'vitest';
// A relative import, not a dependency (see observer.test.ts): the real embedded backend.
import { embeddedBackend } from '../../adapter-embedded/src/index.js';
import type { AcquireRequest, LockBackend } from '../src/backend.js';
import { type Clock, systemClock } from '../src/clock.js';
import { type DlmError, isDlmError } from '../src/errors.js';
import {
  createLockService,
  type LockService,
  type LockServiceOptions,
} from '../src/lock-service.js';
import type { BackendQueue, QueueStep } from '../src/queue-driver.js';

/** Lets the backend's and the service's promise chains run (a manual clock does not move). */
export async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
}

/** The DlmError `promise` rejects with; anything else, or a fulfilment, fails the test. */
export async function failure(promise: Promise<unknown>): Promise<DlmError> {
  const error = await promise.then(
    () => expect.fail('expected a rejection'),
    (error: unknown) => error,
  );
  if (!isDlmError(error)) throw error;
  return error;
}

/** A look at whether `promise` has settled (fulfilled or rejected) yet, without awaiting it. */
export function settledFlag(promise: Promise<unknown>): () => boolean {
  let done = false;
  const mark = () => {
    done = true;
  };
  promise.then(mark, mark);
  return () => done;
}

/** Opens a service on a fresh embedded backend (on the service's clock), seen through `wrap`. */
export type OpenService = (
  options?: Omit<LockServiceOptions, 'backend'>,
  wrap?: (backend: LockBackend) => LockBackend,
) => Promise<LockService>;

/**
 * For the enclosing `describe`: services opened in a test are closed after it, each before its
 * backend.
 */
export function serviceScope(): OpenService {
  const opened: Array<{ backend: LockBackend; service: LockService }> = [];
  afterEach(async () => {
    for (const { backend, service } of opened.splice(0)) {
      await service.close();
      await backend.close();
    }
  });
  return async (options = {}, wrap = (backend) => backend) => {
    const backend = wrap(await embeddedBackend(options.clock ? { clock: options.clock } : {}));
    const service = createLockService({ ...options, backend });
    opened.push({ backend, service });
    return service;
  };
}

/**
 * A queue driver over a backend's own `tryAcquire` (for tests that need a backend with a queue
 * of its own, `capabilities.fairQueue`): each look asks the backend; refused, a waiter sleeps on
 * the holder until the backend reports a release or an expiry.
 */
export function queueOver(real: LockBackend, clock: Clock = systemClock): BackendQueue {
  let waiting = 0;
  const ask = async (request: AcquireRequest): Promise<QueueStep> => {
    const result = await real.tryAcquire(request);
    if (result.granted) return { kind: 'granted', grant: result.grant };
    return result.conflict
      ? { kind: 'conflict', conflict: result.conflict }
      : { kind: 'holder', ttlRemainingMs: result.ttlRemainingMs };
  };
  return {
    clock,
    expirySlackMs: 50,
    isClosed: () => false,
    watch: (name, report) =>
      real.watch(name, (event) => event.type !== 'acquired' && report({ what: 'holder-ended' })),
    driver(request) {
      // Queued from its join until a grant or its leave: its entry is its place in line.
      waiting += 1;
      const place = `${waiting}`;
      const state = { queued: false };
      const step = (queued: boolean) =>
        ask(request).then((answer) => {
          state.queued = queued && answer.kind !== 'granted';
          return answer;
        });
      return {
        entry: () => (state.queued ? place : undefined),
        join: () => step(true),
        look: () => step(state.queued),
        stop: () => undefined,
        async leave() {
          state.queued = false;
        },
      };
    },
  };
}
