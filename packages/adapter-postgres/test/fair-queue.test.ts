import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { lockName, sleep, until, waitThrough } from '@dlm/conformance';
import type { Lease, LockBackend } from '@dlm/core';
import { postgresAvailable } from '@dlm/test-services';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postgresBackend } from '../src/index.js';
import { usePostgres } from './support.js';

const run = postgresAvailable();
const packageDir = join(import.meta.dirname, '..');
const repoDir = join(packageDir, '..', '..');

/**
 * The child runs plain Node (no TypeScript loader), so it imports this package's dist/, built
 * here from the current source (its @dlm/core is the workspace build, as for every dist/).
 */
function buildForChild(): void {
  const tsc = join(repoDir, 'node_modules', '.bin', 'tsc');
  const project = join(packageDir, 'tsconfig.build.json');
  const built = spawnSync(tsc, ['-p', project], { encoding: 'utf8' });
  if (built.status !== 0) throw new Error(`tsc -p ${project}:\n${built.stdout}${built.stderr}`);
}

describe.skipIf(!run)("postgres fair queue (core's loop over its driver)", () => {
  const { postgres, admin, open } = usePostgres('queue_');
  let child: ChildProcess | undefined;
  /** `name`'s entries in the waiters table, oldest first, with whether each is still live. */
  async function entries(name: string): Promise<{ owner: string; live: boolean }[]> {
    const result = await admin().query(
      `SELECT owner, expires_at > clock_timestamp() AS live FROM queue_waiters
        WHERE name = $1 ORDER BY id`,
      [name],
    );
    return result.rows as { owner: string; live: boolean }[];
  }
  const untilQueued = (name: string, count: number) =>
    until(async () => (await entries(name)).length >= count, {
      what: `${count} entries in ${name}'s queue`,
    });
  const queued = (backend: LockBackend, name: string, owner: string, signal?: AbortSignal) =>
    waitThrough(backend, { name, owner, ...(signal ? { signal } : {}) });
  async function held(backend: LockBackend, name: string) {
    const result = await backend.tryAcquire({ name, owner: 'holder', ttlMs: 30_000 });
    if (!result.granted) throw new Error(`expected ${name} to be free`);
    return result.grant;
  }
  /** Waits each in turn, releasing at once, and records the order of the grants. */
  function granting(backend: LockBackend, waiting: Promise<Lease>, order: string[]) {
    return waiting.then(async (lease) => {
      order.push(lease.owner);
      await backend.release({ name: lease.name, token: lease.token });
    });
  }

  beforeAll(async () => {
    // The schema, before the admin reads the table.
    await open();
  });
  // Before the scope's own after-hook closes the backends (after-hooks run in reverse order).
  afterAll(() => {
    child?.kill('SIGKILL');
  });

  it('waiters on three servers are granted in the order they queued; the table is empty after', async () => {
    const servers = [await open(), await open(), await open()];
    const name = lockName('fifo');
    const holder = await held(servers[0]!, name);
    const order: string[] = [];
    const waits: Promise<void>[] = [];
    for (let i = 0; i < 9; i += 1) {
      const server = servers[i % 3]!;
      waits.push(granting(server, queued(server, name, `w${i}`), order));
      await untilQueued(name, i + 1);
    }
    expect((await entries(name)).map((entry) => entry.owner)).toEqual(
      Array.from({ length: 9 }, (_, i) => `w${i}`),
    );
    await servers[0]!.release({ name, token: holder.token });
    await Promise.all(waits);
    expect(order).toEqual(Array.from({ length: 9 }, (_, i) => `w${i}`));
    expect(await entries(name)).toEqual([]);
  });

  it('a try-lock does not take a free lock while an entry is live in its queue', async () => {
    const backend = await open();
    const name = lockName('no-jump');
    // An entry as another server's waiter leaves it (no pid: its end alone counts).
    await admin().query(
      `INSERT INTO queue_waiters (id, name, owner, expires_at)
        VALUES (nextval('queue_waiter_ids'), $1, 'elsewhere', clock_timestamp() + interval '1 minute')`,
      [name],
    );
    expect(await backend.inspect(name)).toBeNull();
    expect((await backend.tryAcquire({ name, owner: 'jumper', ttlMs: 1_000 })).granted).toBe(false);
    // Ended: it no longer counts, and the lock is taken.
    await admin().query(`UPDATE queue_waiters SET expires_at = clock_timestamp() WHERE name = $1`, [
      name,
    ]);
    expect((await backend.tryAcquire({ name, owner: 'jumper', ttlMs: 1_000 })).granted).toBe(true);
    await admin().query('DELETE FROM queue_waiters WHERE name = $1', [name]);
  });

  it('entries stay live and in order while their servers renew them, past many waiterTtlMs', async () => {
    // A second's entries, renewed every third of it: a full run's busiest minutes (2 cores, four
    // files at a time) stalled the renewal past 300 ms entries, both attempts, twice.
    const a = await open({ waiterTtlMs: 1_000 });
    const b = await open({ waiterTtlMs: 1_000 });
    const name = lockName('renewed');
    const holder = await held(a, name);
    const order: string[] = [];
    const waits = [granting(a, queued(a, name, 'first'), order)];
    await untilQueued(name, 1);
    waits.push(granting(b, queued(b, name, 'second'), order));
    await untilQueued(name, 2);
    await sleep(4_000);
    expect(await entries(name)).toEqual([
      { owner: 'first', live: true },
      { owner: 'second', live: true },
    ]);
    await a.release({ name, token: holder.token });
    await Promise.all(waits);
    expect(order).toEqual(['first', 'second']);
    expect(await entries(name)).toEqual([]);
  });

  // kill -9: the database drops the dead server's connection, so its entry stops counting at
  // once (long before its end). SIGSTOP: the connection stays, the entry counts until its end.
  it.each([
    { how: 'killed (kill -9)', signal: 'SIGKILL', waiterTtlMs: 30_000 },
    { how: 'paused (SIGSTOP)', signal: 'SIGSTOP', waiterTtlMs: 600 },
  ] as const)(
    "a waiter's server $how mid-wait leaves no stuck turn: the next is granted, its entry deleted",
    async ({ how, signal, waiterTtlMs }) => {
      buildForChild();
      const backend = await open({ waiterTtlMs });
      const name = lockName('dead-server');
      const holder = await held(backend, name);
      const proc = spawn(
        process.execPath,
        [
          join(packageDir, 'test', 'fixtures', 'queue-waiter.mjs'),
          postgres().url,
          name,
          `${waiterTtlMs}`,
        ],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      child = proc;
      let output = '';
      proc.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
      proc.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
      const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
      await until(async () => (await entries(name)).length === 1, {
        what: "the child's entry in the queue",
        timeoutMs: 10_000,
      });
      const behind = queued(backend, name, 'behind');
      await untilQueued(name, 2);
      proc.kill(signal);
      if (signal === 'SIGKILL') await exited;
      await backend.release({ name, token: holder.token });
      const releasedAt = performance.now();
      const lease = await behind;
      const waitedMs = performance.now() - releasedAt;
      proc.kill('SIGKILL');
      await exited;
      expect(lease.owner).toBe('behind');
      expect(output).not.toContain('granted');
      // kill -9: before the dead entry's end (its connection is gone); SIGSTOP: at its end.
      expect(waitedMs).toBeLessThan(signal === 'SIGKILL' ? waiterTtlMs : waiterTtlMs + 5_000);
      console.log(
        `[postgres] a waiter's server ${how} held up the next one ${Math.round(waitedMs)} ms (waiterTtlMs ${waiterTtlMs})`,
      );
      await backend.release({ name, token: lease.token });
      expect(await entries(name)).toEqual([]);
    },
  );

  it('an aborted wait deletes its entry, and the waiter behind it moves up', async () => {
    const a = await open();
    const b = await open();
    const name = lockName('abort');
    const holder = await held(a, name);
    const controller = new AbortController();
    const quitter = queued(a, name, 'quitter', controller.signal).catch((error: unknown) => error);
    await untilQueued(name, 1);
    const order: string[] = [];
    const next = granting(b, queued(b, name, 'next'), order);
    await untilQueued(name, 2);
    controller.abort();
    expect(await quitter).toMatchObject({ code: 'CANCELLED' });
    expect((await entries(name)).map((entry) => entry.owner)).toEqual(['next']);
    await a.release({ name, token: holder.token });
    await next;
    expect(order).toEqual(['next']);
    expect(await entries(name)).toEqual([]);
  });

  it('closing a backend ends its waits with UNAVAILABLE and deletes their entries', async () => {
    const a = await open();
    const b = await open();
    const name = lockName('close');
    await held(a, name);
    const waits = [queued(b, name, 'w0'), queued(b, name, 'w1')].map((wait) =>
      wait.then(
        () => 'resolved',
        (error: { code?: string }) => error.code,
      ),
    );
    await untilQueued(name, 2);
    await b.close();
    expect(await Promise.all(waits)).toEqual(['UNAVAILABLE', 'UNAVAILABLE']);
    expect(await entries(name)).toEqual([]);
  });

  it('rejects a waiterTtlMs that is not a positive whole number with INVALID_PARAMS', () => {
    for (const waiterTtlMs of [0, -1, 1.5]) {
      expect(() => postgresBackend({ url: postgres().url, waiterTtlMs })).toThrow(
        expect.objectContaining({ code: 'INVALID_PARAMS', details: { field: 'waiterTtlMs' } }),
      );
    }
  });
});
