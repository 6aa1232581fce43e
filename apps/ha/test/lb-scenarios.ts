import { createClient, type DlmClient, type Lease } from '@dlm/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type DlmServer, type StartDlmServer, serversFromEnv } from './dlm-server.js';
import { fencedResource } from './fenced-resource.js';
import { type LbHistory, lbHistory } from './lb-history.js';
import { type LinkProxy, linkProxy } from './link-proxy.js';
import { haproxyAvailable, type LoadBalancer, startLoadBalancer } from './load-balancer.js';
import type { Cluster } from './scenarios.js';

/** A cluster whose members a dlm server can also reach through addresses of the test's choice. */
export interface BalancedCluster extends Cluster {
  /** Each member's client address, `host:port`. */
  addresses: string[];
  /** `serverArgs` with the members at `addresses` instead (the same order). */
  serverArgsFor(addresses: string[]): string[];
}

/** What a backend's load-balancer test says about its cluster; the rest follows from it. */
export interface BalancedClusterParts {
  addresses: string[];
  serverArgsFor(addresses: string[]): string[];
  members: Cluster['members'];
  /** The name (as in `members`) of the member that leads now, once one does. */
  leaderName(): Promise<string>;
  stop(): Promise<void>;
}

/** `--backend BACKEND FLAG a,b,c`: a dlm server's flags for a cluster's members. */
export const clusterFlags = (backend: string, flag: string, members: string[]) => [
  '--backend',
  backend,
  flag,
  members.join(','),
];

/** A cluster whose servers are pointed at `addresses` (through links, at their replacements). */
export function balancedCluster(parts: BalancedClusterParts): BalancedCluster {
  const { addresses, serverArgsFor, members, leaderName, stop } = parts;
  return {
    serverArgs: serverArgsFor(addresses),
    addresses,
    serverArgsFor,
    members,
    async waitForLeader() {
      const name = await leaderName();
      return members.find((member) => member.name === name)!;
    },
    stop,
  };
}

/** How the scenarios start their dlm servers (`serversFromEnv()`: processes or containers). */
export interface ServerKind {
  /** Said in the suite's name and output: `processes`, `containers of IMAGE`. */
  how: string;
  start: StartDlmServer;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
let unique = 0;
const lockName = (label: string) => `lb/${label}/${process.pid}-${Date.now()}-${++unique}`;
const round = (ms: number) => Math.round(ms);
const RETRY = { attempts: 60, initialDelayMs: 100, maxDelayMs: 500 };
const REQUEST_TIMEOUT_MS = 10_000;
/** The shortest lease the scenarios ask for (the history check's expiry bound). */
const MIN_TTL_MS = 5_000;
const SETUP_TIMEOUT_MS = 180_000;

/** Sessions per server, from each server's own `/readyz` (it reports them, ready or not). */
async function sessionsOf(servers: DlmServer[]): Promise<number[]> {
  return Promise.all(
    servers.map(async (server) => {
      const response = await fetch(`http://127.0.0.1:${server.port}/readyz`);
      return ((await response.json()) as { sessions: number }).sessions;
    }),
  );
}

/** What the scenarios share; tests run in order and leave every process running for the next. */
interface LbContext {
  kind: string;
  cluster: BalancedCluster;
  links: LinkProxy[];
  servers: DlmServer[];
  lb: LoadBalancer;
  history: LbHistory;
  /** Clients through the balancer, connected one after another (leastconn spreads them). */
  connectClients(count: number): Promise<Actor[]>;
}

/** A client and its name in the history (`c3`; its waits are `c3-wait`). */
interface Actor {
  proc: string;
  client: DlmClient;
}

/** Extends every lease (retrying while its client reconnects); resolves with each one's time. */
async function extendAll(ctx: LbContext, leases: Lease[], since: number): Promise<number[]> {
  return Promise.all(
    leases.map(async (lease) => {
      await ctx.history.extend(lease, 20_000, { retry: RETRY });
      return performance.now() - since;
    }),
  );
}

async function contention(ctx: LbContext): Promise<void> {
  const { history, kind } = ctx;
  const contenders = await ctx.connectClients(6);
  const perServer = await sessionsOf(ctx.servers);
  expect(perServer.every((sessions) => sessions > 0)).toBe(true);
  const resource = fencedResource();
  const names = [lockName('contended-a'), lockName('contended-b')];
  const until = performance.now() + 3_000;
  await Promise.all(
    contenders.map(async ({ proc, client }, index) => {
      while (performance.now() < until) {
        const name = names[index % 2]!;
        const lease = await history.acquire(proc, client, name, {
          ttlMs: MIN_TTL_MS,
          waitMs: 10_000,
        });
        resource.enter(name, lease.token, proc);
        await sleep(2);
        resource.leave(name);
        expect(await history.release(lease)).toBe(true);
      }
    }),
  );
  expect(resource.violations).toEqual([]);
  for (const name of names) expect(resource.entries.get(name) ?? 0).toBeGreaterThan(5);
  console.log(
    `[lb ${kind}] sessions per server ${perServer.join('/')}; grants ${names.map((n) => resource.entries.get(n)).join(' + ')} in 3 s, 0 violations`,
  );
}

async function serverKill(ctx: LbContext): Promise<void> {
  const { history, kind, servers, lb } = ctx;
  const group = await ctx.connectClients(6);
  const names = group.map(() => lockName('held'));
  const leases = await Promise.all(
    group.map(({ proc, client }, i) => history.acquire(proc, client, names[i]!, { ttlMs: 20_000 })),
  );
  // Each client also waits for the next client's lock: some waits sit on the victim.
  const waits = group.map(({ proc, client }, i) =>
    history.acquire(`${proc}-wait`, client, names[(i + 1) % group.length]!, {
      ttlMs: 10_000,
      waitMs: 40_000,
      retry: RETRY,
    }),
  );
  await sleep(300);
  const before = await sessionsOf(servers);
  expect(before[0]).toBeGreaterThan(0);

  const killedAt = performance.now();
  await servers[0]!.process.kill();
  const extendedAfter = await extendAll(ctx, leases, killedAt);
  expect(leases.map((lease) => lease.lost)).toEqual(leases.map(() => undefined));
  const downAfter = await lb.waitFor('dlm1', 'DOWN', 10_000);

  for (const lease of leases) expect(await history.release(lease, { retry: RETRY })).toBe(true);
  const granted = await Promise.all(waits);
  granted.forEach((lease, i) => {
    const previous = leases[(i + 1) % leases.length]!;
    expect(lease.name).toBe(previous.name);
    expect(lease.token).toBeGreaterThan(previous.token);
  });
  for (const lease of granted) expect(await history.release(lease)).toBe(true);
  console.log(
    `[lb ${kind}] dlm server 1 killed (${before[0]} sessions): all 6 leases extended elsewhere within ${round(Math.max(...extendedAfter))} ms, ${history.lost} lost; HAProxy marked it DOWN after ${round(downAfter)} ms; 6/6 waits re-queued and granted`,
  );

  await servers[0]!.process.start();
  await lb.waitFor('dlm1', 'UP', 15_000);
}

async function memberKill(ctx: LbContext): Promise<void> {
  const { history, kind, cluster } = ctx;
  const [actor] = await ctx.connectClients(1);
  const { proc, client } = actor!;
  const held = await history.acquire(proc, client, lockName('member-kill'), { ttlMs: 20_000 });
  const leader = await cluster.waitForLeader();
  const killedAt = performance.now();
  await leader.process.kill();
  const next = await history.acquire(`${proc}-next`, client, lockName('after-member-kill'), {
    ttlMs: MIN_TTL_MS,
    waitMs: 20_000,
    retry: RETRY,
  });
  const resumedAfter = performance.now() - killedAt;
  await history.extend(held, 20_000, { retry: RETRY });
  expect(held.lost).toBeUndefined();
  expect(await history.release(next, { retry: RETRY })).toBe(true);
  expect(await history.release(held, { retry: RETRY })).toBe(true);
  console.log(
    `[lb ${kind}] leader ${leader.name} killed: a new grant through the balancer ${round(resumedAfter)} ms later; the held lease kept its token`,
  );
  await leader.process.start();
}

async function linkCut(ctx: LbContext): Promise<void> {
  const { history, kind, servers, lb, links } = ctx;
  // The member kill before this may have made dlm3 unready for a while (its backend lost its
  // leader): the new clients must be able to land on it.
  await lb.waitFor('dlm3', 'UP', 15_000);
  const group = await ctx.connectClients(6);
  const leases = await Promise.all(
    group.map(({ proc, client }) =>
      history.acquire(proc, client, lockName('cut'), { ttlMs: 20_000 }),
    ),
  );
  const before = await sessionsOf(servers);
  expect(before[2]).toBeGreaterThan(0);

  const cutAt = performance.now();
  for (const link of links) link.cut();
  const downAfter = await lb.waitFor('dlm3', 'DOWN', 15_000);
  const ready = await fetch(`http://127.0.0.1:${servers[2]!.port}/readyz`);
  expect(ready.status).toBe(503);
  const extendedAfter = await extendAll(ctx, leases, cutAt);
  expect((await sessionsOf(servers))[2]).toBe(0);
  // New clients land on the ready servers only.
  for (const { proc, client } of await ctx.connectClients(3)) {
    const lease = await history.acquire(proc, client, lockName('after-cut'), { ttlMs: MIN_TTL_MS });
    expect(await history.release(lease)).toBe(true);
  }
  expect((await sessionsOf(servers))[2]).toBe(0);
  for (const lease of leases) expect(await history.release(lease, { retry: RETRY })).toBe(true);
  console.log(
    `[lb ${kind}] server 3's backend link cut (${before[2]} sessions): HAProxy marked it DOWN after ${round(downAfter)} ms; every lease extended elsewhere within ${round(Math.max(...extendedAfter))} ms; new clients avoided it`,
  );

  for (const link of links) link.heal();
  await lb.waitFor('dlm3', 'UP', 15_000);
}

/** The fault harness's checkers over every client operation of the scenarios before. */
function checkRun(ctx: LbContext): void {
  const verdict = ctx.history.check();
  const { stats } = verdict.checker;
  console.log(
    `[lb ${ctx.kind}] the fault checker over the run's history: ${stats.ops} operations (${stats.grants} grants, ${stats.unknown} unknown), ${verdict.linearizability.names.length} names checked for linearizability (${verdict.linearizability.inconclusive} inconclusive); ${stats.lost} grants lost, ${verdict.violations} violations`,
  );
  expect(verdict.messages).toEqual([]);
  expect(verdict.linearizability.inconclusive).toBe(0);
  expect(stats.lost).toBe(0);
  // The history holds what the scenarios did: at least their 6 + 6 + 1 + 1 + 6 + 3 grants.
  expect(stats.grants).toBeGreaterThan(23);
}

/**
 * `KIND behind HAProxy`: the scenarios with servers from the environment ({@link serversFromEnv}),
 * skipped unless `run` (the cluster can be started and killed) and HAProxy is installed.
 */
export function behindHaproxy(
  kind: string,
  run: boolean,
  start: () => Promise<BalancedCluster>,
): void {
  describe.skipIf(!run || !haproxyAvailable())(`${kind} behind HAProxy`, () => {
    loadBalancerScenarios(kind, start, serversFromEnv());
  });
}

/**
 * The seed's picture end to end: clients → HAProxy (deploy/haproxy/haproxy.cfg, health-checking
 * /readyz) → three dlm servers (processes or containers, `servers`) → a 3-member cluster.
 * Clients know only the balancer's address. Server 3 reaches the cluster through link proxies
 * the test can cut. Every client operation goes into a history the fault harness checks last.
 */
export function loadBalancerScenarios(
  kind: string,
  start: () => Promise<BalancedCluster>,
  servers: ServerKind,
): void {
  describe(`HAProxy in front of three dlm servers (${servers.how}) over a 3-member ${kind} cluster`, () => {
    const ctx = { kind, links: [], servers: [] } as unknown as LbContext;
    const clients: DlmClient[] = [];
    ctx.connectClients = async (count) => {
      const created: Actor[] = [];
      for (let i = 0; i < count; i += 1) {
        const client = createClient({
          url: ctx.lb.url,
          requestTimeoutMs: REQUEST_TIMEOUT_MS,
          reconnect: { initialDelayMs: 50, maxDelayMs: 500 },
        });
        client.on('error', () => {});
        await client.connect();
        clients.push(client);
        created.push({ proc: `c${clients.length}`, client });
      }
      return created;
    };

    beforeAll(async () => {
      ctx.history = lbHistory(MIN_TTL_MS, REQUEST_TIMEOUT_MS);
      ctx.cluster = await start();
      ctx.links = await Promise.all(ctx.cluster.addresses.map((address) => linkProxy(address)));
      const { serverArgs } = ctx.cluster;
      ctx.servers = [
        await servers.start(`dlm-server 1 (${kind}, LB)`, serverArgs),
        await servers.start(`dlm-server 2 (${kind}, LB)`, serverArgs),
        await servers.start(
          `dlm-server 3 (${kind}, LB, cuttable link)`,
          ctx.cluster.serverArgsFor(ctx.links.map((link) => link.address)),
        ),
      ];
      const ports = ctx.servers.map((server) => server.port) as [number, number, number];
      ctx.lb = await startLoadBalancer(ports);
      for (const server of ['dlm1', 'dlm2', 'dlm3']) await ctx.lb.waitFor(server, 'UP', 10_000);
      // Containers take longer to start (vfs storage copies each one's image), six of them in
      // CI's Docker stage.
    }, SETUP_TIMEOUT_MS);
    afterAll(async () => {
      await Promise.all(clients.map((client) => client.close().catch(() => {})));
      await ctx.lb?.process.kill();
      await Promise.all(ctx.servers.map((server) => server.close()));
      await Promise.all(ctx.links.map((link) => link.close()));
      await ctx.cluster?.stop();
      ctx.history?.close();
    });

    it('clients spread over the three servers contend through the balancer: never two holders, tokens increase', () =>
      contention(ctx));
    it('kill -9 of a dlm server while its clients hold and wait: they reconnect through the balancer, extend and release by token, their waits re-queue', () =>
      serverKill(ctx));
    it('one cluster member killed: locking through the balancer goes on', () => memberKill(ctx));
    it('a server whose backend link is cut answers /readyz 503: the balancer stops sending to it and its clients move', () =>
      linkCut(ctx));
    it("the fault harness's checker over the clients' history of the scenarios: no violation, no grant lost", () =>
      checkRun(ctx));
  });
}
