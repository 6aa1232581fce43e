#!/usr/bin/env node
/**
 * One process of the lock workload that the linearizability check reads: several clients,
 * each on its own connection to one of the dlm servers, each looping over try-acquire,
 * release and get on a few shared names, recording every operation (invoke, then ok / fail /
 * info = unknown) in its own history file. Requests are sent once (no client retry), so an
 * operation's effect, if any, lies within its recorded interval or, when its reply was lost,
 * within the checker's horizon after it. The client's own clean-up (a late or lost grant given
 * back, a failed release retried after a reconnect) is why a failed acquire or release is
 * recorded as unknown (`lockCompletionOf`).
 */
import { join } from 'node:path';
import { createClient, type DlmClient, type Lease } from '@dlm/client';
import {
  createHistoryWriter,
  type HistoryWriter,
  lockCompletionOf,
  type Phase,
} from './history.js';
import type { LockOpName } from './linearizability.js';
import { sleep } from './time.js';

/** What the harness tells a lock workload process (as JSON in `DLM_FAULTS_LOCK_WORKER`). */
export interface LockWorkerConfig {
  /** This process's id; its clients are `<proc>.c1`, `<proc>.c2`, … */
  proc: string;
  /** One dlm server URL per client. */
  urls: string[];
  names: string[];
  ttlMs: number;
  requestTimeoutMs: number;
  /** Where each client's history goes (`<dir>/<client>.jsonl`). */
  historyDir: string;
  /** Random pause between operations, ms. */
  thinkMs: [number, number];
  /**
   * How often a grant is released at once, with no pause and no other operation between: a
   * short critical section, as most callers hold a lock. These tight grant → release cycles are
   * what exposes a grant that takes its token before it waits for the name (issue 28): with a
   * pause after every grant, a waiting statement rarely outlives another's whole cycle.
   */
  releaseAtOnce: number;
}

const config = JSON.parse(process.env.DLM_FAULTS_LOCK_WORKER ?? '') as LockWorkerConfig;
let stopping = false;
process.on('SIGTERM', () => {
  stopping = true;
});

const pick = <T>(values: readonly T[]): T => values[Math.floor(Math.random() * values.length)]!;

async function run(client: DlmClient, history: HistoryWriter): Promise<void> {
  let seq = 0;
  const held = new Map<string, Lease>();
  async function op<T>(
    f: LockOpName,
    name: string,
    token: string | undefined,
    call: () => Promise<T>,
    done: (value: T) => {
      type?: Phase;
      token?: string;
      released?: boolean;
      held?: boolean;
      error?: string;
    },
  ): Promise<void> {
    const id = ++seq;
    const base = {
      kind: 'lock' as const,
      op: id,
      f,
      name,
      ...(token === undefined ? {} : { token }),
    };
    history.record({ ...base, type: 'invoke' });
    try {
      const value = await call();
      const { type = 'ok', ...fields } = done(value);
      history.record({ ...base, type, ...fields });
    } catch (error) {
      history.record({ ...base, ...lockCompletionOf(f, error) });
    }
  }

  const release = (lease: Lease) =>
    op(
      'release',
      lease.name,
      lease.token.toString(),
      () => lease.release({ retry: false }),
      (released) => ({ released }),
    );

  while (!stopping) {
    const holding = [...held.values()];
    const roll = Math.random();
    if (holding.length > 0 && roll < 0.45) {
      const lease = pick(holding);
      held.delete(lease.name);
      await release(lease);
    } else if (roll < 0.7) {
      const name = pick(config.names);
      await op(
        'get',
        name,
        undefined,
        () => client.get(name, { retry: false }),
        (info) => (info.held ? { held: true, token: info.token.toString() } : { held: false }),
      );
    } else {
      const name = pick(config.names.filter((n) => !held.has(n)));
      if (name === undefined) continue;
      await op(
        'acquire',
        name,
        undefined,
        async () => {
          const lease = await client.tryAcquire(name, { ttlMs: config.ttlMs, retry: false });
          if (lease) held.set(name, lease);
          return lease;
        },
        (lease) =>
          lease
            ? { token: lease.token.toString() }
            : { type: 'fail', error: 'LOCK_HELD: held by another owner' },
      );
      const lease = held.get(name);
      if (lease && Math.random() < config.releaseAtOnce) {
        held.delete(name);
        await release(lease);
      }
    }
    const [min, max] = config.thinkMs;
    await sleep(min + Math.random() * (max - min));
  }
  // What is still held is released here, recorded: `client.close()` would release it too, but
  // unrecorded, and a grant by a process still running would then look like a second holder.
  for (const lease of held.values()) await release(lease);
}

const clients = config.urls.map((url, i) => {
  const proc = `${config.proc}.c${i + 1}`;
  const client = createClient({
    url,
    name: `dlm-faults ${proc}`,
    requestTimeoutMs: config.requestTimeoutMs,
    pingIntervalMs: 1_000,
    retry: false,
    reconnect: { initialDelayMs: 50, maxDelayMs: 500 },
  });
  // Background failures (a connection that dropped…) are part of the faults.
  client.on('error', () => {});
  return { client, history: createHistoryWriter(join(config.historyDir, `${proc}.jsonl`), proc) };
});
await Promise.all(clients.map(({ client, history }) => run(client, history)));
await Promise.race([Promise.all(clients.map(({ client }) => client.close())), sleep(2_000)]);
for (const { history } of clients) history.close();
process.exit(0);
