import { createClient, type DlmClient, type Lease } from '@dlm/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type DlmServer, startDlmServer } from './dlm-server.js';
import { fencedResource } from './fenced-resource.js';
import { type LinkProxy, linkProxy } from './link-proxy.js';
import { type LoadBalancer, startLoadBalancer } from './load-balancer.js';
import type { Cluster } from './scenarios.js';

/** A cluster whose members a dlm server can also reach through addresses of the test's choice. */
export interface BalancedCluster extends Cluster {
  /** Each member's client address, `host:port`. */
  addresses: string[];
  /** `serverArgs` with the members at `addresses` instead (the same order). */
  serverArgsFor(addresses: string[]): string[];
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
let unique = 0;
const lockName = (label: string) => `lb/${label}/${process.pid}-${Date.now()}-${++unique}`;
const round = (ms: number) => Math.round(ms);
const RETRY = { attempts: 60, initialDelayMs: 100, maxDelayMs: 500 };

/** Sessions per server, from each server's own `/readyz` (it reports them, ready or not). */
async function sessionsOf(servers: DlmServer[]): Promise<number[]> {
  return Promise.all(
    servers.map(async (server) => {
      const response = await fetch(`http://127.0.0.1:${server.port}/readyz`);
      return ((await response.json()) as { sessions: number }).sessions;
    }),
  );
}

/** Extends every lease (retrying while its client reconnects); resolves with each one's time. */
async function extendAll(leases: Lease[], since: number): Promise<number[]> {
  return Promise.all(
    leases.map(async (lease) => {
      await lease.extend(20_000, { retry: RETRY });
      return performance.now() - since;
    }),
  );
}

/**
 * The seed's picture end to end: clients → HAProxy (deploy/haproxy/haproxy.cfg, health-checking
 * /readyz) → three dlm servers → a 3-member cluster. Clients know only the balancer's address.
 * Server 3 reaches the cluster through link proxies the test can cut. Tests run in order and
 * leave every process running for the next.
 */
export function loadBalancerScenarios(kind: string, start: () => Promise<BalancedCluster>): void {
  describe(`HAProxy in front of three dlm servers over a 3-member ${kind} cluster`, () => {
    let cluster: BalancedCluster;
    let links: LinkProxy[] = [];
    let servers: DlmServer[] = [];
    let lb: LoadBalancer;
    const clients: DlmClient[] = [];

    /** Clients through the balancer, connected one after another (leastconn spreads them). */
    async function connectClients(count: number): Promise<DlmClient[]> {
      const created: DlmClient[] = [];
      for (let i = 0; i < count; i += 1) {
        const client = createClient({
          url: lb.url,
          requestTimeoutMs: 10_000,
          reconnect: { initialDelayMs: 50, maxDelayMs: 500 },
        });
        client.on('error', () => {});
        await client.connect();
        clients.push(client);
        created.push(client);
      }
      return created;
    }

    beforeAll(async () => {
      cluster = await start();
      links = await Promise.all(cluster.addresses.map((address) => linkProxy(address)));
      servers = [
        await startDlmServer(`dlm-server 1 (${kind}, LB)`, cluster.serverArgs),
        await startDlmServer(`dlm-server 2 (${kind}, LB)`, cluster.serverArgs),
        await startDlmServer(
          `dlm-server 3 (${kind}, LB, cuttable link)`,
          cluster.serverArgsFor(links.map((link) => link.address)),
        ),
      ];
      lb = await startLoadBalancer([servers[0]!.port, servers[1]!.port, servers[2]!.port]);
      for (const server of ['dlm1', 'dlm2', 'dlm3']) await lb.waitFor(server, 'UP', 10_000);
    });
    afterAll(async () => {
      await Promise.all(clients.map((client) => client.close().catch(() => {})));
      await lb?.process.kill();
      await Promise.all(servers.map((server) => server.process.kill()));
      await Promise.all(links.map((link) => link.close()));
      await cluster?.stop();
    });

    it('clients spread over the three servers contend through the balancer: never two holders, tokens increase', async () => {
      const contenders = await connectClients(6);
      const perServer = await sessionsOf(servers);
      expect(perServer.every((sessions) => sessions > 0)).toBe(true);
      const resource = fencedResource();
      const names = [lockName('contended-a'), lockName('contended-b')];
      const until = performance.now() + 3_000;
      await Promise.all(
        contenders.map(async (client, index) => {
          while (performance.now() < until) {
            const name = names[index % 2]!;
            const lease = await client.acquire(name, { ttlMs: 5_000, waitMs: 10_000 });
            resource.enter(name, lease.token, `client ${index}`);
            await sleep(2);
            resource.leave(name);
            expect(await lease.release()).toBe(true);
          }
        }),
      );
      expect(resource.violations).toEqual([]);
      for (const name of names) expect(resource.entries.get(name) ?? 0).toBeGreaterThan(5);
      console.log(
        `[lb ${kind}] sessions per server ${perServer.join('/')}; grants ${names.map((n) => resource.entries.get(n)).join(' + ')} in 3 s, 0 violations`,
      );
    });

    it('kill -9 of a dlm server while its clients hold and wait: they reconnect through the balancer, extend and release by token, their waits re-queue', async () => {
      const group = await connectClients(6);
      const names = group.map(() => lockName('held'));
      const leases = await Promise.all(
        group.map((client, i) => client.acquire(names[i]!, { ttlMs: 20_000 })),
      );
      // Each client also waits for the next client's lock: some waits sit on the victim.
      const waits = group.map((client, i) =>
        client.acquire(names[(i + 1) % group.length]!, {
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
      const extendedAfter = await extendAll(leases, killedAt);
      expect(leases.map((lease) => lease.lost)).toEqual(leases.map(() => undefined));
      const downAfter = await lb.waitFor('dlm1', 'DOWN', 10_000);

      for (const lease of leases) expect(await lease.release({ retry: RETRY })).toBe(true);
      const granted = await Promise.all(waits);
      granted.forEach((lease, i) => {
        const previous = leases[(i + 1) % leases.length]!;
        expect(lease.name).toBe(previous.name);
        expect(lease.token).toBeGreaterThan(previous.token);
      });
      for (const lease of granted) expect(await lease.release()).toBe(true);
      console.log(
        `[lb ${kind}] dlm server 1 killed (${before[0]} sessions): all 6 leases extended elsewhere within ${round(Math.max(...extendedAfter))} ms, 0 lost; HAProxy marked it DOWN after ${round(downAfter)} ms; 6/6 waits re-queued and granted`,
      );

      await servers[0]!.process.start();
      await lb.waitFor('dlm1', 'UP', 15_000);
    });

    it('one cluster member killed: locking through the balancer goes on', async () => {
      const [client] = await connectClients(1);
      const name = lockName('member-kill');
      const held = await client!.acquire(name, { ttlMs: 20_000 });
      const leader = await cluster.waitForLeader();
      const killedAt = performance.now();
      await leader.process.kill();
      const next = await client!.acquire(lockName('after-member-kill'), {
        ttlMs: 5_000,
        waitMs: 20_000,
        retry: RETRY,
      });
      const resumedAfter = performance.now() - killedAt;
      await held.extend(20_000, { retry: RETRY });
      expect(held.lost).toBeUndefined();
      expect(await next.release({ retry: RETRY })).toBe(true);
      expect(await held.release({ retry: RETRY })).toBe(true);
      console.log(
        `[lb ${kind}] leader ${leader.name} killed: a new grant through the balancer ${round(resumedAfter)} ms later; the held lease kept its token`,
      );
      await leader.process.start();
    });

    it('a server whose backend link is cut answers /readyz 503: the balancer stops sending to it and its clients move', async () => {
      const group = await connectClients(6);
      const leases = await Promise.all(
        group.map((client) => client.acquire(lockName('cut'), { ttlMs: 20_000 })),
      );
      const before = await sessionsOf(servers);
      expect(before[2]).toBeGreaterThan(0);

      const cutAt = performance.now();
      for (const link of links) link.cut();
      const downAfter = await lb.waitFor('dlm3', 'DOWN', 15_000);
      const ready = await fetch(`http://127.0.0.1:${servers[2]!.port}/readyz`);
      expect(ready.status).toBe(503);
      const extendedAfter = await extendAll(leases, cutAt);
      expect((await sessionsOf(servers))[2]).toBe(0);
      // New clients land on the ready servers only.
      const late = await connectClients(3);
      for (const client of late) {
        const lease = await client.acquire(lockName('after-cut'), { ttlMs: 5_000 });
        expect(await lease.release()).toBe(true);
      }
      expect((await sessionsOf(servers))[2]).toBe(0);
      for (const lease of leases) expect(await lease.release({ retry: RETRY })).toBe(true);
      console.log(
        `[lb ${kind}] server 3's backend link cut (${before[2]} sessions): HAProxy marked it DOWN after ${round(downAfter)} ms; every lease extended elsewhere within ${round(Math.max(...extendedAfter))} ms; new clients avoided it`,
      );

      for (const link of links) link.heal();
      await lb.waitFor('dlm3', 'UP', 15_000);
    });
  });
}
