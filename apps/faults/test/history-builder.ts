import type { HistoryEvent, OpEvent } from '../src/history.js';

/** Builds hand-made histories for the checker's tests: every time is given explicitly. */
export function historyBuilder() {
  const events: HistoryEvent[] = [];
  let seq = 0;
  const op = (
    proc: string,
    f: OpEvent['f'],
    name: string,
    invokeT: number,
    done: { t: number; type?: OpEvent['type'] } | undefined,
    fields: Partial<OpEvent> = {},
    doneFields: Partial<OpEvent> = {},
  ) => {
    const id = ++seq;
    events.push({ kind: 'op', t: invokeT, proc, op: id, f, type: 'invoke', name, ...fields });
    if (done) {
      events.push({
        kind: 'op',
        t: done.t,
        proc,
        op: id,
        f,
        type: done.type ?? 'ok',
        name,
        ...fields,
        ...doneFields,
      });
    }
  };
  const builder = {
    events,
    acquire(
      proc: string,
      name: string,
      invokeT: number,
      okT: number,
      token: number,
      options: {
        ttlMs?: number;
        deadline?: number;
        mode?: 'exclusive' | 'shared';
        limit?: number;
        lockDelayMs?: number;
        maxHoldMs?: number;
      } = {},
    ) {
      const ttlMs = options.ttlMs ?? 1_000;
      const mode = {
        ...(options.mode ? { mode: options.mode } : {}),
        ...(options.limit === undefined ? {} : { limit: options.limit }),
        ...(options.lockDelayMs === undefined ? {} : { lockDelayMs: options.lockDelayMs }),
        ...(options.maxHoldMs === undefined ? {} : { maxHoldMs: options.maxHoldMs }),
      };
      op(proc, 'acquire', name, invokeT, { t: okT }, mode, {
        token: String(token),
        ttlMs,
        deadline: options.deadline ?? okT + ttlMs - 10,
      });
      return builder;
    },
    read(proc: string, name: string, invokeT: number, okT: number, token: number, value: number) {
      op(proc, 'read', name, invokeT, { t: okT }, { token: String(token) }, { value });
      return builder;
    },
    write(proc: string, name: string, invokeT: number, okT: number, token: number, value: number) {
      op(
        proc,
        'write',
        name,
        invokeT,
        { t: okT },
        { token: String(token), value, read: value - 1 },
      );
      return builder;
    },
    extend(
      proc: string,
      name: string,
      invokeT: number,
      okT: number,
      token: number,
      deadline: number,
    ) {
      op(
        proc,
        'extend',
        name,
        invokeT,
        { t: okT },
        { token: String(token) },
        { deadline, ttlMs: 1_000 },
      );
      return builder;
    },
    release(
      proc: string,
      name: string,
      invokeT: number,
      okT: number,
      token: number,
      released = true,
    ) {
      op(proc, 'release', name, invokeT, { t: okT }, { token: String(token) }, { released });
      return builder;
    },
    lost(proc: string, name: string, t: number, token: number) {
      events.push({ kind: 'lost', t, proc, name, token: String(token), reason: 'deadline' });
      return builder;
    },
    resource(
      t: number,
      f: 'read' | 'write',
      name: string,
      token: number,
      value: number,
      accepted = true,
      previous?: number,
    ) {
      events.push({
        kind: 'resource',
        t,
        proc: 'resource',
        f,
        name,
        token: String(token),
        accepted,
        value,
        ...(previous === undefined ? {} : { previous }),
      });
      return builder;
    },
    process(t: number, target: string, what: 'pause' | 'resume' | 'kill' | 'stop') {
      events.push({ kind: 'process', t, proc: 'nemesis', target, what });
      return builder;
    },
    fault(
      t: number,
      id: number,
      nemesis: string,
      phase: 'start' | 'end',
      target: string,
      holding?: { name: string; token: string },
    ) {
      events.push({
        kind: 'fault',
        t,
        proc: 'nemesis',
        id,
        nemesis,
        phase,
        target,
        ...(holding ? { holding } : {}),
      });
      return builder;
    },
    /** A last event far in the future, so that liveness deadlines fall inside the history. */
    end(t: number) {
      events.push({ kind: 'process', t, proc: 'nemesis', target: 'nobody', what: 'stop' });
      return builder;
    },
    sorted(): HistoryEvent[] {
      return [...events].sort((a, b) => a.t - b.t);
    },
  };
  return builder;
}

/**
 * Two holders taking turns on lock `x`, everything as it should be: p1 holds token 1 and
 * writes 1, releases; p2 (waiting since t=5) gets token 2, writes 2, releases.
 */
export function cleanHistory() {
  return historyBuilder()
    .acquire('p1', 'x', 0, 1, 1)
    .read('p1', 'x', 2, 3, 1, 0)
    .resource(2.5, 'read', 'x', 1, 0)
    .write('p1', 'x', 10, 11, 1, 1)
    .resource(10.5, 'write', 'x', 1, 1, true, 0)
    .release('p1', 'x', 12, 13, 1)
    .acquire('p2', 'x', 5, 14, 2, { deadline: 1_004 })
    .read('p2', 'x', 15, 16, 2, 1)
    .resource(15.5, 'read', 'x', 2, 1)
    .write('p2', 'x', 20, 21, 2, 2)
    .resource(20.5, 'write', 'x', 2, 2, true, 1)
    .release('p2', 'x', 22, 23, 2);
}
