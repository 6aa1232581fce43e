import { createClient, type DlmClient, type Lease } from '@dlm/client';
import { isDlmError } from '@dlm/core';
import type { ManagedProcess } from '@dlm/test-services';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type DlmServer, startDlmServer } from './dlm-server.js';
import { type FailoverProxy, failoverProxy } from './failover-proxy.js';
import { fencedResource } from './fenced-resource.js';

/** A 3-member cluster (etcd) or ensemble (ZooKeeper), as the scenarios need it. */
export interface Cluster {
  /** Flags that point `dlm-server` at the cluster. */
  serverArgs: string[];
  members: Array<{ name: string; process: ManagedProcess }>;
  /** The member that leads now, once one does. */
  waitForLeader(): Promise<{ name: string; process: ManagedProcess }>;
  stop(): Promise<void>;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
let unique = 0;
const lockName = (label: string) => `ha/${label}/${process.pid}-${Date.now()}-${++unique}`;
const quantile = (values: number[], q: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN;
};
const round = (ms: number) => Math.round(ms);

/** Keeps locking on fresh names through each client, back to back, and records the grants. */
function probe(clients: DlmClient[]) {
  const grants: Array<{ client: number; startedAt: number; endedAt: number }> = [];
  let running = true;
  const loops = clients.map(async (client, index) => {
    while (running) {
      const startedAt = performance.now();
      try {
        const lease = await client.tryAcquire(lockName(`probe-${index}`), {
          ttlMs: 5_000,
          retry: false,
        });
        if (lease) {
          grants.push({ client: index, startedAt, endedAt: performance.now() });
          await lease.release({ retry: false }).catch(() => {});
        }
      } catch {
        await sleep(20);
      }
    }
  });
  return {
    /** How long after `at` each client's first grant requested after `at` came back. */
    async pausesAfter(at: number, timeoutMs: number): Promise<number[]> {
      const deadline = performance.now() + timeoutMs;
      for (;;) {
        const pauses = clients.map((_, index) => {
          const first = grants.find((grant) => grant.client === index && grant.startedAt >= at);
          return first ? first.endedAt - at : undefined;
        });
        if (pauses.every((pause) => pause !== undefined)) return pauses as number[];
        if (performance.now() > deadline) throw new Error('locking did not resume in time');
        await sleep(20);
      }
    },
    async stop(): Promise<void> {
      running = false;
      await Promise.all(loops);
    },
  };
}

/** What the scenarios share: the cluster, the two servers, and clients closed at the end. */
interface HaContext {
  kind: string;
  cluster: Cluster;
  servers: DlmServer[];
  proxies: FailoverProxy[];
  /** A client that the suite closes afterwards. */
  client(url: string, options?: { retry?: false }): DlmClient;
}

/** Uncontended acquire and release latency through each server, reported. */
async function uncontendedLatency(ctx: HaContext): Promise<void> {
  const { kind, servers, client } = ctx;
  const report: string[] = [];
  for (const server of servers) {
    const c = client(server.url);
    await c.connect();
    const acquires: number[] = [];
    const releases: number[] = [];
    for (let i = 0; i < 40; i += 1) {
      const name = lockName('latency');
      let started = performance.now();
      const lease = await c.acquire(name, { ttlMs: 5_000 });
      acquires.push(performance.now() - started);
      started = performance.now();
      expect(await lease.release()).toBe(true);
      releases.push(performance.now() - started);
    }
    report.push(
      `${server.label}: acquire p50 ${quantile(acquires, 0.5).toFixed(1)} ms, p95 ${quantile(acquires, 0.95).toFixed(1)} ms; release p50 ${quantile(releases, 0.5).toFixed(1)} ms`,
    );
  }
  console.log(`[ha ${kind}] uncontended: ${report.join('; ')}`);
}

/** Clients on both servers contend for two names: never two holders, tokens increase. */
async function contention(ctx: HaContext): Promise<void> {
  const { kind, servers, client } = ctx;
  const resource = fencedResource();
  const names = [lockName('contended-a'), lockName('contended-b')];
  const contenders = servers.flatMap((server, s) =>
    Array.from({ length: 3 }, (_, i) => ({ who: `s${s + 1}-c${i}`, c: client(server.url) })),
  );
  const grantsPerServer = [0, 0];
  const until = performance.now() + 4_000;
  await Promise.all(
    contenders.map(async ({ who, c }, index) => {
      let round = index;
      while (performance.now() < until) {
        const name = names[round++ % names.length]!;
        const lease = await c.acquire(name, { ttlMs: 5_000, waitMs: 20_000 });
        resource.enter(name, lease.token, who);
        await sleep(2);
        resource.leave(name);
        expect(await lease.release()).toBe(true);
        grantsPerServer[who.startsWith('s1') ? 0 : 1]! += 1;
      }
    }),
  );
  console.log(
    `[ha ${kind}] contention: ${grantsPerServer[0]} grants through server 1, ${grantsPerServer[1]} through server 2`,
  );
  expect(resource.violations).toEqual([]);
  expect(grantsPerServer[0]).toBeGreaterThan(5);
  expect(grantsPerServer[1]).toBeGreaterThan(5);
}

/** Waiters on both servers are granted in the order they queued (the backend's queue). */
async function crossServerOrder(ctx: HaContext): Promise<void> {
  const { servers, client } = ctx;
  const name = lockName('fifo');
  const holder = await client(servers[0]!.url).acquire(name, { ttlMs: 30_000 });
  const order: string[] = [];
  const waits: Promise<void>[] = [];
  for (let i = 0; i < 6; i += 1) {
    const c = client(servers[i % 2]!.url);
    await c.connect();
    waits.push(
      c.acquire(name, { ttlMs: 10_000, waitMs: 30_000 }).then(async (lease) => {
        order.push(`w${i}`);
        await sleep(20);
        await lease.release();
      }),
    );
    // Each waiter takes its place in the queue before the next one arrives.
    await sleep(300);
  }
  await holder.release();
  await Promise.all(waits);
  expect(order).toEqual(['w0', 'w1', 'w2', 'w3', 'w4', 'w5']);
}

/** A majority down: UNAVAILABLE in bounded time, nothing granted; locking resumes after. */
async function majorityDown(ctx: HaContext): Promise<void> {
  const { kind, cluster, servers, client } = ctx;
  const direct = servers.map((server) => client(server.url, { retry: false }));
  const before = await direct[0]!.acquire(lockName('before'), { ttlMs: 5_000 });
  await before.release();
  const name = lockName('outage');
  const [first, second] = cluster.members;
  await Promise.all([first!.process.kill(), second!.process.kill()]);
  const waits: number[] = [];
  for (const c of direct) {
    for (const waitMs of [0, 3_000]) {
      const started = performance.now();
      const error = await c.acquire(name, { ttlMs: 5_000, waitMs }).then(
        () => undefined,
        (failure: unknown) => failure,
      );
      const elapsed = performance.now() - started;
      expect(isDlmError(error, 'UNAVAILABLE')).toBe(true);
      expect(elapsed).toBeLessThan(8_000);
      waits.push(round(elapsed));
    }
  }
  console.log(
    `[ha ${kind}] majority down: UNAVAILABLE after ${waits.join(', ')} ms (try-lock and 3 s wait, per server)`,
  );

  const restartedAt = performance.now();
  await Promise.all([first!.process.start(), second!.process.start()]);
  const load = probe(direct);
  const pauses = await load.pausesAfter(restartedAt, 40_000);
  await load.stop();
  console.log(
    `[ha ${kind}] majority back: first grant ${pauses.map(round).join(' / ')} ms after restarting the two members`,
  );
  // Nothing was granted while the majority was down, and tokens keep growing.
  const state = await direct[1]!.get(name);
  expect(state.held).toBe(false);
  const after = await direct[1]!.acquire(name, { ttlMs: 5_000 });
  expect(after.token).toBeGreaterThan(before.token);
  await after.release();
}

/** A dlm server killed under its clients: they carry on through the other one. */
async function serverFailover(ctx: HaContext): Promise<void> {
  const { kind, servers, client, proxies } = ctx;
  // Each client knows one URL: a proxy that sends it to server 1 while it lives, else 2.
  const proxy = await failoverProxy([servers[0]!.port, servers[1]!.port]);
  proxies.push(proxy);
  const retry = { attempts: 20, initialDelayMs: 100, maxDelayMs: 1_000 };
  const holder = client(proxy.url);
  const otherHolder = client(proxy.url);
  const waiter = client(proxy.url);
  const name = lockName('failover');
  const otherName = lockName('failover-other');
  const lease: Lease = await holder.acquire(name, { ttlMs: 20_000 });
  const otherLease: Lease = await otherHolder.acquire(otherName, { ttlMs: 20_000 });
  let granted: Lease | undefined;
  const waiting = waiter.acquire(name, { ttlMs: 10_000, waitMs: 45_000, retry }).then(
    (l) => {
      granted = l;
      return { lease: l };
    },
    (error: unknown) => ({ error }),
  );
  await sleep(500);
  expect(granted).toBeUndefined();

  const killedAt = performance.now();
  await servers[0]!.process.kill();
  // Through server 2 now: extend and release with the tokens granted by server 1.
  await lease.extend(20_000, { retry });
  const extendedAfter = performance.now() - killedAt;
  expect(lease.lost).toBeUndefined();
  expect(await otherLease.release({ retry })).toBe(true);
  expect(granted).toBeUndefined();
  const releasedAt = performance.now();
  expect(await lease.release({ retry })).toBe(true);
  const outcome = await waiting;
  if ('error' in outcome) throw outcome.error;
  const next = outcome.lease;
  const grantedAfter = performance.now() - releasedAt;
  console.log(
    `[ha ${kind}] dlm server killed: holder extended through the other server ${round(extendedAfter)} ms after the kill; the waiter (re-sent there) was granted ${round(grantedAfter)} ms after the release`,
  );
  expect(next.token).toBeGreaterThan(lease.token);
  const state = await client(servers[1]!.url).get(name);
  expect(state.held && state.owner).toBe(next.owner);
  expect(await next.release()).toBe(true);

  // The server comes back empty-handed (it is stateless): it serves the same locks.
  await servers[0]!.process.start();
  const again = await client(servers[0]!.url).acquire(name, { ttlMs: 5_000 });
  expect(again.token).toBeGreaterThan(next.token);
  await again.release();
}

/** kill -9 of a cluster member: locking goes on through both servers, a held lock stays held. */
async function memberKill(ctx: HaContext, role: 'leader' | 'follower'): Promise<void> {
  const { kind, cluster, servers, client } = ctx;
  const holderClient = client(servers[0]!.url);
  const name = lockName(`held-${role}`);
  const held = await holderClient.acquire(name, { ttlMs: 30_000 });
  const load = probe(servers.map((server) => client(server.url, { retry: false })));
  await sleep(500);
  const leader = await cluster.waitForLeader();
  const victim =
    role === 'leader'
      ? leader
      : cluster.members.find((member) => member !== leader && member.process.running)!;
  const killedAt = performance.now();
  await victim.process.kill();
  const pauses = await load.pausesAfter(killedAt, 30_000);
  await load.stop();
  console.log(
    `[ha ${kind}] kill -9 of the ${role} (${victim.name}): first grant after ${pauses.map(round).join(' / ')} ms (server 1 / server 2)`,
  );
  // The lock held before the kill is still held, by the same token, seen from the other
  // server; nobody else gets it; its holder extends it.
  const other = client(servers[1]!.url);
  const state = await other.get(name);
  expect(state.held && state.token).toBe(held.token);
  expect(await other.tryAcquire(name, { ttlMs: 5_000 })).toBeNull();
  await held.extend(30_000);
  expect(held.lost).toBeUndefined();
  expect(await held.release()).toBe(true);
  await victim.process.start();
  await cluster.waitForLeader();
}

/**
 * The high-availability scenarios of issue 4, against `start()`'s cluster with two dlm server
 * processes over it. Tests run in order and share the cluster; each one leaves every member and
 * both servers running for the next.
 */
export function haScenarios(kind: string, start: () => Promise<Cluster>): void {
  describe(`two dlm servers over a 3-member ${kind} cluster`, () => {
    const clients: DlmClient[] = [];
    const ctx: HaContext = {
      kind,
      cluster: undefined as unknown as Cluster,
      servers: [],
      proxies: [],
      client: (url, options = {}) => {
        const created = createClient({
          url,
          requestTimeoutMs: 15_000,
          reconnect: { initialDelayMs: 50, maxDelayMs: 500 },
          ...options,
        });
        clients.push(created);
        return created;
      },
    };

    beforeAll(async () => {
      ctx.cluster = await start();
      ctx.servers = [
        await startDlmServer(`dlm-server 1 (${kind})`, ctx.cluster.serverArgs),
        await startDlmServer(`dlm-server 2 (${kind})`, ctx.cluster.serverArgs),
      ];
    });
    afterAll(async () => {
      await Promise.all(clients.map((c) => c.close().catch(() => {})));
      await Promise.all(ctx.proxies.map((proxy) => proxy.close()));
      await Promise.all(ctx.servers.map((server) => server.process.kill()));
      await ctx.cluster?.stop();
    });

    it('uncontended latency through either server (reported)', () => uncontendedLatency(ctx));
    it('clients on both servers contend for the same locks: never two holders, tokens strictly increase', () =>
      contention(ctx));
    it("waiters on both servers are granted in the order they queued (the backend's queue)", () =>
      crossServerOrder(ctx));
    for (const role of ['leader', 'follower'] as const) {
      it(`kill -9 of the ${role}: locking goes on through both servers, a held lock stays held`, () =>
        memberKill(ctx, role));
    }
    it('a majority down: UNAVAILABLE in bounded time, nothing granted; locking resumes when the members return', () =>
      majorityDown(ctx));
    it('a dlm server killed while its clients hold locks and wait: they reconnect to the other server, extend and release with their tokens', () =>
      serverFailover(ctx));
  });
}
