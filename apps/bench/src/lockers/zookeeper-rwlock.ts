import type * as zookeeper from 'node-zookeeper-client';
import { type Locker, peerTarget, type Target, WaitTimeout } from './locker.js';
import { call, connectZooKeeper } from './zookeeper-connection.js';
import { createContender, waitForDeletion } from './zookeeper-recipe.js';

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

const sequence = (child: string) => child.slice(-10);

/** The children in queue order (the suffix is the parent's sequence counter, zero-padded). */
async function queue(client: zookeeper.Client, parent: string): Promise<string[]> {
  const children = await call<string[]>((cb) => client.getChildren(parent, cb));
  return children.sort((a, b) =>
    sequence(a) < sequence(b) ? -1 : sequence(a) > sequence(b) ? 1 : 0,
  );
}

/** What `mine` waits for in `children`: null when it holds the lock. */
function blocker(children: string[], mine: string, write: boolean): string | null {
  const index = children.indexOf(mine);
  if (index < 0) throw new Error(`contender node ${mine} vanished (session lost?)`);
  if (write) return index === 0 ? null : children[index - 1]!;
  const writers = children.slice(0, index).filter((child) => child.startsWith('write-'));
  return writers.at(-1) ?? null;
}

export function zookeeperReadWriteTarget(connect: string, root: string): Target {
  return peerTarget(
    'peer-zk-rwlock',
    'ZooKeeper read-write recipe (node-zookeeper-client)',
    async (): Promise<Locker> => {
      const client = await connectZooKeeper(connect);
      return {
        async acquire(name, { waitMs, mode, limit }) {
          if (mode === 'shared' && limit !== undefined) {
            throw new Error('the read-write recipe has no semaphore');
          }
          const write = mode !== 'shared';
          const parent = `${root}/${name}`;
          const node = await createContender(client, parent, write ? 'write-' : 'read-');
          const mine = node.slice(parent.length + 1);
          const deadline = performance.now() + waitMs;
          const release = async () => {
            await call<void>((cb) => client.remove(node, -1, (error) => cb(error, undefined)));
          };
          for (;;) {
            const waitFor = blocker(await queue(client, parent), mine, write);
            if (waitFor === null) return { release };
            const gone =
              performance.now() < deadline &&
              (await waitForDeletion(client, `${parent}/${waitFor}`, deadline));
            if (!gone) {
              await release();
              throw new WaitTimeout(name);
            }
          }
        },
        async close() {
          client.close();
        },
      };
    },
    // Only workload 7: its exclusive path is the write lock, which workloads 1–3 would measure
    // as a second ZooKeeper mutex beside the recipe's.
    { sharedWorkloads: ['read-write'], onlyWorkloads: ['read-write'] },
  );
}
