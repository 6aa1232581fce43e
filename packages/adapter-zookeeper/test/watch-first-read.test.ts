import { lockName, until } from '@dlm/conformance';
import type { LockEvent } from '@dlm/core';
import { zookeeperAvailable } from '@dlm/test-services';
import { describe, expect, it } from 'vitest';
import { lockPaths } from '../src/zk-paths.js';
import { openSession, type ZkSession } from '../src/zk-session.js';
import { watchHolders } from '../src/zk-watch.js';
import { useZooKeeper } from './support.js';

const ROOT = '/dlm-watch-first-read';

describe.skipIf(!zookeeperAvailable())('a watch whose first read finds no name node', () => {
  const { zk, open } = useZooKeeper(ROOT);

  // Seen in a loaded full run (conformance "watch reports each holder's grant and end"): the
  // watch's first look found no name node, the grant came before its next read, and that read —
  // taken as the watch's starting point — swallowed the grant.
  it('reports a holder granted before its next read as acquired', async () => {
    const session = openSession(zk().connectString, { sessionTimeoutMs: 4_000 });
    const name = lockName('first-read');
    let atExists!: () => void;
    const reachedExists = new Promise<void>((resolve) => {
      atExists = resolve;
    });
    let letGo!: () => void;
    const gate = new Promise<void>((resolve) => {
      letGo = resolve;
    });
    // The watch's `exists` (its step after a read that found no name node) waits for the grant.
    const slowExists: ZkSession = {
      ...session,
      async exists(limit, path, watcher) {
        atExists();
        await gate;
        return session.exists(limit, path, watcher);
      },
    };
    const watch = watchHolders(slowExists, lockPaths(ROOT), 2_000);
    const events: LockEvent[] = [];
    const stop = watch.subscribe(name, (event) => events.push(event));
    try {
      await reachedExists;
      const other = open();
      const result = await other.tryAcquire({ name, owner: 'a', ttlMs: 10_000 });
      expect(result.granted).toBe(true);
      letGo();
      await until(() => events.length > 0, { what: 'the grant reported', timeoutMs: 5_000 });
      expect(events[0]).toMatchObject({
        type: 'acquired',
        owner: 'a',
        token: result.granted ? result.grant.token : undefined,
      });
    } finally {
      letGo();
      stop();
      watch.close();
      await session.close();
    }
  });
});
