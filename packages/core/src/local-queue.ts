import { askBackend } from './acquire-attempt.js';
import type { AcquireRequest } from './backend.js';
import type { ServiceContext } from './name-state.js';
import type { AroundBackendCall } from './observer.js';
import type { BackendQueue, QueueDriver, QueueStep, QueueWaits } from './queue-driver.js';
import type { LockMode } from './validation.js';
import { waitLoopOf } from './wait-loop.js';

/**
 * The per-server FIFO: the queue of a backend that does not order waiters itself, as the
 * simplest driver of core's one wait loop. An entry is this server's wait, in arrival order;
 * only the head asks the backend (`tryAcquire`), so a release wakes one waiter, not all (no
 * thundering herd). The head sleeps until a backend event about the name (a release, an expiry:
 * the service reports them) or until the holder's remaining lease runs out; when it is granted,
 * the next head asks at once, so a run of shared heads is granted back to back up to the limit,
 * and the first head refused (an exclusive one behind shared holders) holds back every wait
 * behind it, which keeps FIFO and starves no writer. A request the holders can never grant as
 * asked (`conflict`) ends that wait alone.
 */

/** A request of this server's FIFO: the backend's, with its caller's wrapper of backend calls. */
export interface LocalRequest extends AcquireRequest {
  keyHash: string;
  mode: LockMode;
  limit: number;
  around?: AroundBackendCall | undefined;
}

export function localQueue(ctx: ServiceContext): BackendQueue<LocalRequest> {
  let waits: QueueWaits | undefined;
  let next = 0;
  return {
    clock: ctx.clock,
    // The service's own timer at the holder's end: asks the backend just after it.
    expirySlackMs: 1,
    unknownHolderMs: ctx.settings.unknownTtlRetryMs,
    isClosed: () => ctx.closed,
    attach(given) {
      waits = given;
    },
    driver({ around, ...request }) {
      let id: string | undefined;
      /** The head asks the backend; any other sleeps on the wait just ahead of it. */
      const look = async (): Promise<QueueStep> => {
        const mine = waits!.drivers(request.name);
        let ahead: string | undefined;
        for (const other of mine.slice(0, mine.indexOf(driver))) ahead = other.entry() ?? ahead;
        if (ahead !== undefined) return { kind: 'predecessor', key: ahead };
        const result = await askBackend(ctx, request, around);
        if (result.granted) {
          id = undefined;
          return { kind: 'granted', grant: result.grant };
        }
        if (result.conflict) return { kind: 'conflict', conflict: result.conflict };
        return { kind: 'holder', ttlRemainingMs: result.ttlRemainingMs };
      };
      const driver: QueueDriver = {
        entry: () => id,
        join() {
          next += 1;
          id = `${next}`;
          return look();
        },
        look,
        stop() {},
        async leave() {
          id = undefined;
        },
      };
      return driver;
    },
  };
}

/** The service's FIFO loop, made on its first wait. */
export function localLoop(ctx: ServiceContext) {
  ctx.local ??= localQueue(ctx);
  return waitLoopOf(ctx.local, ctx.backend.kind);
}
