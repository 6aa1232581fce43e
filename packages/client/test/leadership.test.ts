import { describe, expect, it } from 'vitest';
import type { DlmClient, Leader } from '../src/index.js';
import { eventually, lockName, sleep, startProxy, useProxiedServer } from './support.js';

const env = useProxiedServer();
const { client } = env;

/** Collects what `observe` yields, until stopped. */
function collect(c: DlmClient, name: string) {
  const seen: (Leader | null)[] = [];
  const controller = new AbortController();
  const done = (async () => {
    for await (const leader of c.observe(name, { signal: controller.signal })) seen.push(leader);
  })();
  return {
    seen,
    async stop() {
      controller.abort();
      await done;
    },
  };
}

describe('campaign', () => {
  it('one candidate leads; the next leads after it resigns, with a higher term; observers see both', async () => {
    const name = lockName('election');
    const observer = collect(client(), name);
    await eventually(() => observer.seen.length === 1);
    expect(observer.seen).toEqual([null]);

    const a = await client().campaign(name, { ttlMs: 5_000, owner: 'candidate-a' });
    expect(a.owner).toBe('candidate-a');
    expect(await env.backend.inspect(name)).toMatchObject({ owner: 'candidate-a', token: a.term });

    let bLeads = false;
    const bCampaign = client()
      .campaign(name, { ttlMs: 5_000, owner: 'candidate-b' })
      .then((leadership) => {
        bLeads = true;
        return leadership;
      });
    await sleep(200);
    expect(bLeads).toBe(false); // a still leads

    await a.resign();
    expect(a.signal.aborted).toBe(true);
    const b = await bCampaign;
    expect(b.term).toBeGreaterThan(a.term);
    expect(b.signal.aborted).toBe(false);

    await eventually(() => observer.seen.some((l) => l?.owner === 'candidate-b'));
    // Leaders in order, terms increasing, no repeats; a gap (null) between them may show.
    const leaders = observer.seen.filter((l): l is Leader => l !== null);
    expect(leaders).toEqual([
      { owner: 'candidate-a', term: a.term },
      { owner: 'candidate-b', term: b.term },
    ]);
    await b.resign();
    await eventually(() => observer.seen.at(-1) === null);
    await observer.stop();
  });

  it('leadership is renewed in the background past many TTLs', async () => {
    const name = lockName('renewed');
    const leadership = await client().campaign(name, { ttlMs: 500 });
    await sleep(1_700);
    expect(leadership.signal.aborted).toBe(false);
    expect(await env.backend.inspect(name)).toMatchObject({ token: leadership.term });
    await leadership.resign();
  });

  it('losing leadership aborts its signal and emits lost: an event, not an exception', async () => {
    const name = lockName('revoked');
    const c = client();
    const lost: string[] = [];
    c.on('lost', ({ lease, reason }) => {
      if (lease.name === name) lost.push(reason);
    });
    const leadership = await c.campaign(name, { ttlMs: 10_000 });
    await env.backend.revoke?.(name);
    await eventually(() => leadership.signal.aborted, 2_000);
    expect(leadership.signal.reason).toMatchObject({ code: 'NOT_HOLDER' });
    expect(leadership.lease.lost).toBe('revoked');
    expect(lost).toEqual(['revoked']);
    // Resigning a lost leadership is harmless.
    await leadership.resign();
  });

  it('aborting a campaign rejects CANCELLED and never leaves this candidate leading', async () => {
    const name = lockName('abandoned');
    const leader = await client().campaign(name, { ttlMs: 10_000 });
    const controller = new AbortController();
    const campaigning = client().campaign(name, { ttlMs: 10_000, signal: controller.signal });
    await sleep(100);
    controller.abort();
    await expect(campaigning).rejects.toMatchObject({ code: 'CANCELLED' });
    // The server still queues the abandoned wait; once the leader resigns, the grant that
    // reaches the abandoned candidate is handed back at once.
    await leader.resign();
    await eventually(async () => (await env.backend.inspect(name)) === null, 2_000);
  });

  it('a leader cut off from the server knows it lost before the follower leads', async () => {
    const proxy = await startProxy(env.server.port);
    try {
      const name = lockName('cut-off');
      const leaderClient = client({
        url: `ws://127.0.0.1:${proxy.port}`,
        pingIntervalMs: 0,
        reconnect: { initialDelayMs: 20, maxDelayMs: 100 },
      });
      const leadership = await leaderClient.campaign(name, { ttlMs: 600 });
      let lostAt = 0;
      leadership.signal.addEventListener('abort', () => {
        lostAt = performance.now();
      });
      let followerAt = 0;
      const follower = client()
        .campaign(name, { ttlMs: 600 })
        .then((l) => {
          followerAt = performance.now();
          return l;
        });
      await sleep(100);
      const cutAt = performance.now();
      proxy.blackhole('requests'); // renewals stop reaching the server
      const next = await follower;
      expect(next.term).toBeGreaterThan(leadership.term);
      expect(lostAt).toBeGreaterThan(0);
      // Never two leaders at once, as far as each of them knows.
      expect(lostAt).toBeLessThan(followerAt);
      // The follower took over within about a TTL of the cut.
      expect(followerAt - cutAt).toBeLessThan(600 + 500);
      proxy.blackhole('none');
      await next.resign();
    } finally {
      await proxy.close();
    }
  });
});

describe('observe', () => {
  it('starts with the current leader (its owner looked up), and leaving the loop is clean', async () => {
    const name = lockName('observe-current');
    const leadership = await client().campaign(name, { ttlMs: 5_000, owner: 'the-leader' });
    const c = client();
    let first: Leader | null | undefined;
    for await (const leader of c.observe(name)) {
      first = leader;
      break;
    }
    expect(first).toEqual({ owner: 'the-leader', term: leadership.term });
    // The loop's watch was stopped on the way out: a later change reaches nobody, and nothing
    // rejects unhandled (failOnUnhandledRejections).
    await leadership.resign();
    await sleep(50);
  });
});
