import { type BackendQueue, type QueueDriver, type QueueStep, queueWaits } from '@dlm/core';
import { acquire, ruleOf } from './memory-backend.js';
import type { MemoryStore } from './memory-store.js';

/**
 * The example backend's queue driver: a list of entries per name in the store, which core's one
 * wait loop runs over (`LockBackend.queue`). Each step is one step on the store: join (add my
 * entry), look (the grant rule over the holders and the entries ahead of mine; granted, my entry
 * leaves in the same step), leave. The loop does the rest: the deadline, the wake rules, this
 * server's waiters, leaving on every path, and no grant reported once its lease is over.
 */
export function memoryQueue(store: MemoryStore, isClosed: () => boolean) {
  const waits = queueWaits();
  const queue: BackendQueue = {
    clock: { now: () => performance.now(), setTimer },
    // The store reports expiries: the timer only covers a missed one.
    expirySlackMs: 20,
    isClosed,
    attach: waits.attach,
    watch: (name, report) =>
      store.listen(name, (event) => {
        if ('left' in event) report({ what: 'entry-left', key: event.left });
        else if (event.lock.type !== 'acquired') report({ what: 'holder-ended' });
      }),
    // How many wait for the name, on every server (`lock.get`'s waiters, scope "backend").
    count: async (name) => store.state(name).queue.length,
    driver(request): QueueDriver {
      let id: string | undefined;
      const look = async (): Promise<QueueStep> => {
        const entries = store.state(request.name).queue;
        const at = entries.findIndex((entry) => entry.id === id);
        if (at < 0) return { kind: 'again' };
        const { result, decision } = acquire(store, request, entries.slice(0, at));
        if (result.granted) {
          store.leave(request.name, id!);
          id = undefined;
          return { kind: 'granted', grant: result.grant };
        }
        if (result.conflict) return { kind: 'conflict', conflict: result.conflict };
        if (decision.kind === 'wait' && decision.on === 'entry') {
          const waitedOn = decision.entry === 'nearest' ? at - 1 : lastBlocking(entries, at);
          return { kind: 'predecessor', key: entries[waitedOn]!.id };
        }
        return { kind: 'holder', ttlRemainingMs: result.ttlRemainingMs };
      };
      const lastBlocking = (entries: readonly { mode: string; limit: number }[], at: number) => {
        const rule = ruleOf(request);
        return entries.findLastIndex(
          (entry, index) => index < at && (entry.mode !== 'shared' || entry.limit !== rule.limit),
        );
      };
      return {
        entry: () => id,
        join() {
          id = store.nextEntry();
          store.state(request.name).queue.push({ id, ...ruleOf(request) });
          return look();
        },
        look,
        stop() {},
        // My place among every server's entries (one read; the store reports each departure).
        async position() {
          const at = store.state(request.name).queue.findIndex((entry) => entry.id === id);
          return at < 0 ? undefined : at + 1;
        },
        async leave(entry) {
          if (id === entry) id = undefined;
          store.leave(request.name, entry);
        },
      };
    },
  };
  return { queue, close: () => waits.close() };
}

function setTimer(callback: () => void, delayMs: number) {
  const timer = setTimeout(callback, delayMs);
  return { cancel: () => clearTimeout(timer) };
}
