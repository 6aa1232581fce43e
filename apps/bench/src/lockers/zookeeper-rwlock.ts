import type * as zookeeper from 'node-zookeeper-client';
import { type Locker, peerTarget, type Target } from './locker.js';
import { connectZooKeeper } from './zookeeper-connection.js';
import { contend } from './zookeeper-recipe.js';

/**
 * A read-write lock on node-zookeeper-client, by Curator's algorithm
 * (`InterProcessReadWriteLock`): every contender creates an EPHEMERAL_SEQUENTIAL child of the
 * lock's node, `read-` or `write-`; children are ordered by sequence number. A writer holds when
 * its node is first, and otherwise watches its predecessor; a reader holds when no `write-`
 * node is ahead of it, and otherwise watches the last writer ahead of it. So writers are served
 * in order, readers between two writers together, and a reader that comes after a waiting
 * writer waits for it (no writer starvation), as dlm's shared mode does. Releasing deletes the
 * own node; the lease is the ZooKeeper session (`ttlMs` has no per-lock meaning here).
 */

/** One contender: the read-write recipe's nodes under `root`, on its own session. */
function readWriteLocker(client: zookeeper.Client, root: string): Locker {
  return {
    async acquire(name, { waitMs, mode, limit }) {
      if (mode === 'shared' && limit !== undefined) {
        throw new Error('the read-write recipe has no semaphore');
      }
      const write = mode !== 'shared';
      return contend(client, root, name, waitMs, { prefix: write ? 'write-' : 'read-', write });
    },
    async close() {
      client.close();
    },
  };
}

export function zookeeperReadWriteTarget(connect: string, root: string): Target {
  return peerTarget(
    'peer-zk-rwlock',
    'ZooKeeper read-write recipe (node-zookeeper-client)',
    async () => readWriteLocker(await connectZooKeeper(connect), root),
    // Only workload 7: its exclusive path is the write lock, which workloads 1–3 would measure
    // as a second ZooKeeper mutex beside the recipe's.
    { sharedWorkloads: ['read-write'], onlyWorkloads: ['read-write'] },
  );
}
