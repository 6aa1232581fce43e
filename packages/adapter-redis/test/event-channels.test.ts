import { lockName, sleep, until } from '@dlm/conformance';
import { createLockService, type LockService } from '@dlm/core';
import { redisAvailable } from '@dlm/test-services';
import { Redis, type RedisOptions } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { IDLE_MS } from '../src/event-channels.js';
import { type RedisBackend, redisBackend } from '../src/index.js';
import { encodeName, nameChannel } from '../src/key-encoding.js';
import { useRedis } from './support.js';

const enabled = redisAvailable();

/**
 * The pub/sub connection a backend made from `client` (it calls `duplicate()` once), with a
 * count of the messages Redis delivered to it and a way to hold its SUBSCRIBEs back.
 */
interface Tapped {
  client: Redis;
  /** Messages the backend's subscriber connection received (channel and pattern ones). */
  heard(): number;
  /** SUBSCRIBE commands wait for this before they are sent (default: none). */
  holdSubscribes(until: Promise<void>): void;
}

function tappedClient(url: string): Tapped {
  const client = new Redis(url, {
    enableOfflineQueue: false,
    autoResendUnfulfilledCommands: false,
    maxRetriesPerRequest: 0,
  });
  let heard = 0;
  let gate: Promise<void> | undefined;
  const duplicate = client.duplicate.bind(client);
  client.duplicate = (override?: Partial<RedisOptions>) => {
    const subscriber = duplicate(override);
    subscriber.on('message', () => {
      heard += 1;
    });
    subscriber.on('pmessage', () => {
      heard += 1;
    });
    const subscribe = subscriber.subscribe.bind(subscriber) as (...channels: string[]) => unknown;
    subscriber.subscribe = ((...channels: string[]) =>
      gate
        ? gate.then(() => subscribe(...channels))
        : subscribe(...channels)) as Redis['subscribe'];
    return subscriber;
  };
  return {
    client,
    heard: () => heard,
    holdSubscribes(until) {
      gate = until;
    },
  };
}

describe.skipIf(!enabled)('redis per-name event channels', () => {
  const redis = useRedis();
  const opened: Array<{ service: LockService; backend: RedisBackend; client: Redis | undefined }> =
    [];
  afterEach(async () => {
    for (const { service, backend, client } of opened.splice(0)) {
      await service.close();
      await backend.close();
      client?.disconnect();
    }
  });
  const service = async (tap?: Tapped) => {
    const backend = redisBackend(tap ? { client: tap.client } : { url: redis().url });
    await backend.ready();
    const lockService = createLockService({ backend });
    opened.push({ service: lockService, backend, client: tap?.client });
    return lockService;
  };
  const subscribers = async (name: string): Promise<number> => {
    const probe = new Redis(redis().url);
    try {
      const reply = (await probe.pubsub('NUMSUB', nameChannel('dlm:', encodeName(name)))) as [
        string,
        number,
      ];
      return Number(reply[1]);
    } finally {
      probe.disconnect();
    }
  };

  it('a service with no holder, waiter or watch on a name hears none of its events', async () => {
    const tap = tappedClient(redis().url);
    const [busy, quiet] = [await service(), await service(tap)];
    const name = lockName('channels-quiet');
    const pairs = async (count: number) => {
      for (let i = 0; i < count; i += 1) {
        const lease = await busy.acquire({ name, owner: 'busy', ttlMs: 10_000 });
        await busy.release({ name, token: lease.token, leaseKey: lease.leaseKey });
      }
    };
    await pairs(50);
    await sleep(100);
    expect(tap.heard()).toBe(0);

    // The same count catches a service that does hear the name: once it watches it.
    const unwatch = quiet.watch(name, () => {});
    await until(
      async () => {
        await pairs(1);
        return tap.heard() >= 2;
      },
      { what: 'the watcher to hear a grant and a release' },
    );

    // Unwatched, the channel goes once idle (the busy service's too, idle now), and the service
    // hears nothing again.
    unwatch();
    await until(async () => (await subscribers(name)) === 0, {
      what: 'the subscriptions gone',
      timeoutMs: IDLE_MS * 3 + 2_000,
    });
    const before = tap.heard();
    await pairs(10);
    await sleep(100);
    expect(tap.heard()).toBe(before);
  });

  it('a waiter whose subscription is late still sees a release published before it', async () => {
    const tap = tappedClient(redis().url);
    const [holder, waiter] = [await service(), await service(tap)];
    const name = lockName('channels-race');
    const held = await holder.acquire({ name, owner: 'holder', ttlMs: 20_000 });
    let subscribe: () => void = () => {};
    tap.holdSubscribes(
      new Promise<void>((resolve) => {
        subscribe = resolve;
      }),
    );
    const startedAt = performance.now();
    const waited = waiter.acquire({ name, owner: 'waiter', ttlMs: 10_000, waitMs: 8_000 });
    // The release goes out while the waiter's channel is not subscribed yet: a wait that looked
    // before its subscription was in place would have seen the lock held, missed this release,
    // and slept until the holder's lease end (20 s), past its own wait.
    await sleep(200);
    await holder.release({ name, token: held.token, leaseKey: held.leaseKey });
    await sleep(200);
    subscribe();
    const lease = await waited;
    expect(lease.token).toBeGreaterThan(held.token);
    expect(performance.now() - startedAt).toBeLessThan(3_000);
  });
});
