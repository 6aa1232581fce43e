import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import {
  breakable,
  freePort,
  type ManagedProcess,
  startEtcd,
  startProcess,
  startRedis,
  startZooKeeper,
} from '@dlm/test-services';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';

// The built server as its own process, against a real redis-server that the test stops and
// starts again: what a load balancer's health check sees.
const MAIN = fileURLToPath(new URL('../dist/main.js', import.meta.url));
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const running: ManagedProcess[] = [];
afterEach(async () => {
  for (const proc of running.splice(0)) await proc.kill();
});
beforeAll(() => {
  if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: build first (pnpm build)`);
});

async function serve(args: string[]) {
  const port = await freePort();
  const proc = await startProcess({
    name: 'dlm-server',
    command: process.execPath,
    args: [MAIN, '--port', String(port), '--log-level', 'info', ...args],
    // Live, not ready: the backend may be down on purpose.
    ready: async () => (await fetch(`http://127.0.0.1:${port}/livez`)).ok,
  });
  running.push(proc);
  const http = `http://127.0.0.1:${port}`;
  return { proc, port, http, logLines: () => logLines(proc) };
}

function logLines(proc: ManagedProcess): Array<Record<string, unknown>> {
  return proc
    .output()
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

async function probe(url: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const response = await fetch(url);
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

/** `dlm_backend_up`'s value in the server's /metrics. */
async function backendUp(http: string): Promise<number> {
  const text = await (await fetch(`${http}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith('dlm_backend_up '));
  return Number(line?.split(' ')[1]);
}

/** Polls until `check` holds; returns how long it took. */
async function within(ms: number, what: string, check: () => Promise<boolean>): Promise<number> {
  const started = Date.now();
  for (;;) {
    if (await check().catch(() => false)) return Date.now() - started;
    if (Date.now() - started > ms) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(50);
  }
}

describe('health probes of the embedded backend', () => {
  it('/livez, /readyz and /healthz answer 200 once the server listens; dlm_backend_up is 1', async () => {
    const server = await serve(['--memory']);
    expect((await probe(`${server.http}/livez`)).status).toBe(200);
    const ready = await probe(`${server.http}/readyz`);
    expect(ready).toMatchObject({ status: 200, body: { status: 'ok', backend: 'embedded' } });
    expect((await probe(`${server.http}/healthz`)).status).toBe(200);
    expect(await backendUp(server.http)).toBe(1);
  });
});

describe.runIf(breakable('redis'))('health probes of the redis backend', () => {
  it('/readyz is 503 with a reason before Redis first answers, 200 once it does, 503 while it is down, 200 when it is back; /livez stays 200', async () => {
    const redis = await startRedis();
    await redis.kill();
    const server = await serve(['--backend', 'redis', '--redis-url', redis.url]);
    try {
      // Never connected yet.
      const before = await probe(`${server.http}/readyz`);
      expect(before.status).toBe(503);
      expect(before.body).toMatchObject({ status: 'unavailable', backend: 'redis' });
      expect(typeof before.body.reason).toBe('string');
      expect((await probe(`${server.http}/healthz`)).status).toBe(503);
      expect((await probe(`${server.http}/livez`)).status).toBe(200);
      expect(await backendUp(server.http)).toBe(0);
      expect(logLines(server.proc).some((line) => line.msg === 'backend connected')).toBe(false);

      await redis.start();
      const upAfterMs = await within(5_000, 'ready after Redis started', async () => {
        return (await probe(`${server.http}/readyz`)).status === 200;
      });
      console.log(`[health] ready ${upAfterMs} ms after Redis started`);
      expect(upAfterMs).toBeLessThan(3_000);
      expect(await backendUp(server.http)).toBe(1);
      // "connected" once it really is, and after the line that said it was not.
      const messages = logLines(server.proc).map((line) => line.msg);
      expect(messages.indexOf('backend unavailable')).toBeGreaterThanOrEqual(0);
      expect(messages.indexOf('backend connected')).toBeGreaterThan(
        messages.indexOf('backend unavailable'),
      );

      await redis.kill();
      const downAfterMs = await within(5_000, 'not ready after Redis stopped', async () => {
        const readiness = await probe(`${server.http}/readyz`);
        return readiness.status === 503 && typeof readiness.body.reason === 'string';
      });
      console.log(`[health] unready ${downAfterMs} ms after Redis stopped`);
      // One probe interval (1 s) plus its time-out (1 s) at most, with room for a loaded machine.
      expect(downAfterMs).toBeLessThan(3_000);
      expect(await backendUp(server.http)).toBe(0);
      expect((await probe(`${server.http}/livez`)).status).toBe(200);

      await redis.start();
      const againAfterMs = await within(5_000, 'ready again after Redis restarted', async () => {
        return (await probe(`${server.http}/readyz`)).status === 200;
      });
      console.log(`[health] ready again ${againAfterMs} ms after Redis restarted`);
      expect(againAfterMs).toBeLessThan(3_000);
      expect(await backendUp(server.http)).toBe(1);
      expect(logLines(server.proc).filter((l) => l.msg === 'backend connected again')).toHaveLength(
        1,
      );
    } finally {
      await redis.kill().catch(() => {});
    }
  }, 40_000);

  it('the listening line gives the ws:// address, the Redis URL is its own field', async () => {
    const redis = await startRedis();
    try {
      const server = await serve(['--backend', 'redis', '--redis-url', redis.url]);
      await within(5_000, 'listening logged', async () =>
        logLines(server.proc).some((line) => line.msg === 'listening'),
      );
      const listening = logLines(server.proc).find((line) => line.msg === 'listening')!;
      expect(listening.url).toBe(`ws://127.0.0.1:${server.port}/v1/ws`);
      expect(listening.redisUrl).toBe(redis.url);
      const messages = logLines(server.proc).map((line) => line.msg);
      // Redis was up: connected before listening, and no outage line.
      expect(messages.indexOf('backend connected')).toBeLessThan(messages.indexOf('listening'));
      expect(messages).not.toContain('backend unavailable');
    } finally {
      await redis.kill();
    }
  });
});

/** Ready while the service runs, 503 within the bound once it is killed, ready again after. */
async function outageAndReturn(args: string[], service: ManagedProcess, kind: string) {
  const server = await serve(args);
  await within(10_000, `${kind}: ready`, async () => {
    return (await probe(`${server.http}/readyz`)).status === 200;
  });
  await service.kill();
  const downAfterMs = await within(10_000, `${kind}: unready after the kill`, async () => {
    const readiness = await probe(`${server.http}/readyz`);
    return readiness.status === 503 && readiness.body.backend === kind;
  });
  // A probe that hangs counts as failed after its 1 s time-out, one interval (1 s) after the
  // last answer at worst: 2 s, with room for a loaded machine.
  expect(downAfterMs).toBeLessThan(4_000);
  expect(await backendUp(server.http)).toBe(0);
  await service.start();
  // The adapter's own reconnect sets the pace here (etcd's and ZooKeeper's clients back off).
  const upAfterMs = await within(20_000, `${kind}: ready after the restart`, async () => {
    return (await probe(`${server.http}/readyz`)).status === 200;
  });
  console.log(
    `[health] ${kind}: unready ${downAfterMs} ms after the kill, ready ${upAfterMs} ms after the restart`,
  );
  expect(await backendUp(server.http)).toBe(1);
}

describe.runIf(breakable('etcd'))('health probes of the etcd backend', () => {
  it('/readyz follows a one-member etcd going away and coming back', async () => {
    const etcd = await startEtcd();
    try {
      await outageAndReturn(
        ['--backend', 'etcd', '--etcd-endpoints', etcd.endpoints.join(',')],
        etcd.members[0]!.process,
        'etcd',
      );
    } finally {
      await etcd.stop();
    }
  }, 60_000);
});

describe.runIf(breakable('zookeeper'))('health probes of the ZooKeeper backend', () => {
  it('/readyz follows a one-member ZooKeeper going away and coming back', async () => {
    const zk = await startZooKeeper();
    try {
      await outageAndReturn(
        ['--backend', 'zookeeper', '--zk-connect', zk.connectString],
        zk.members[0]!.process,
        'zookeeper',
      );
    } finally {
      await zk.stop();
    }
  }, 90_000);
});
