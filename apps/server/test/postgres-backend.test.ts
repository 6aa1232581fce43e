import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import {
  freePort,
  type ManagedProcess,
  type PostgresService,
  postgresAvailable,
  startPostgres,
  startProcess,
} from '@dlm/test-services';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, parseConfig } from '../src/index.js';
import { connect } from './ws-peer.js';

// The built server (`dist/main.js`) as its own OS process, as a user runs it. `pnpm test`
// builds first.
const MAIN = fileURLToPath(new URL('../dist/main.js', import.meta.url));

describe('--backend postgres flags', () => {
  it('a missing or non-postgres URL is a usage error naming the flag', () => {
    expect(() => parseConfig(['--backend', 'postgres'], {})).toThrow(ConfigError);
    expect(() => parseConfig(['--backend', 'postgres'], {})).toThrow(/--postgres-url/);
    expect(() =>
      parseConfig(['--backend', 'postgres', '--postgres-url', 'redis://127.0.0.1:6379'], {}),
    ).toThrow(/--postgres-url must be a postgres:\/\/ URL/);
  });
});

describe.runIf(postgresAvailable())('dlm-server on PostgreSQL', () => {
  let postgres: PostgresService;
  const servers: ManagedProcess[] = [];
  beforeAll(async () => {
    if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: build first (pnpm build)`);
    postgres = await startPostgres();
  });
  afterAll(async () => {
    for (const server of servers) await server.kill();
    await postgres?.stop();
  });

  async function serve(): Promise<string> {
    const port = await freePort();
    const proc = await startProcess({
      name: 'dlm-server',
      command: process.execPath,
      args: [MAIN, '--port', String(port), '--log-level', 'warn', '--backend', 'postgres'],
      env: { DLM_POSTGRES_URL: postgres.url },
      ready: async () => (await fetch(`http://127.0.0.1:${port}/healthz`)).ok,
    });
    servers.push(proc);
    return `ws://127.0.0.1:${port}/v1/ws`;
  }

  it('two servers on one database share locks: one grants, the other refuses, then wakes its waiter on the release', async () => {
    const [first, second] = await Promise.all([serve(), serve()]);
    const a = await connect(first);
    const b = await connect(second);
    expect((await a.hello()).backend).toBe('postgres');
    await b.hello();
    const lease = (await a.call('lock.acquire', { name: 'pg/shared', ttlMs: 10_000, owner: 'a' }))
      .result;
    expect(BigInt(lease.token)).toBeGreaterThan(0n);
    const refused = await b.call('lock.acquire', { name: 'pg/shared', ttlMs: 5_000, owner: 'b' });
    expect(refused.error?.data.code).toBe('LOCK_HELD');
    const waiting = b.call('lock.acquire', {
      name: 'pg/shared',
      ttlMs: 5_000,
      owner: 'b',
      waitMs: 10_000,
    });
    await new Promise((resolve) => setTimeout(resolve, 100));
    const releasedAt = performance.now();
    expect(
      (await a.call('lock.release', { name: 'pg/shared', token: lease.token })).result,
    ).toEqual({ released: true });
    const granted = (await waiting).result;
    // Woken by the NOTIFY, not by a poll at the old lease's end (10 s).
    expect(performance.now() - releasedAt).toBeLessThan(1_500);
    expect(granted.owner).toBe('b');
    expect(BigInt(granted.token)).toBeGreaterThan(BigInt(lease.token));
    a.close();
    b.close();
  });
});
