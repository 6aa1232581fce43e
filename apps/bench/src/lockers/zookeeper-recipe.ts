import * as zookeeper from 'node-zookeeper-client';
import { type Locker, peerTarget, type Target, WaitTimeout } from './locker.js';
import { call, connectZooKeeper } from './zookeeper-connection.js';

/**
 * The ZooKeeper lock recipe from ZooKeeper's own documentation, on node-zookeeper-client:
 * each contender creates an EPHEMERAL_SEQUENTIAL child under the lock's parent node; the lowest
 * sequence number holds the lock; every other contender watches only its predecessor (no herd)
 * and looks again when that node goes. Releasing deletes the own node. Parents are created on
 * first use (persistent, like Curator's default), and the lease is the ZooKeeper session, so
 * `ttlMs` has no per-lock meaning here.
 */

const isCode = (error: unknown, code: number) =>
  error instanceof zookeeper.Exception && error.getCode() === code;

/** Creates `parent/PREFIXnnnnnnnnnn` (ephemeral, sequential), the parent on first use. */
export async function createContender(
  client: zookeeper.Client,
  parent: string,
  prefix = 'lock-',
): Promise<string> {
  const create = () =>
    call<string>((cb) =>
      client.create(`${parent}/${prefix}`, zookeeper.CreateMode.EPHEMERAL_SEQUENTIAL, cb),
    );
  try {
    return await create();
  } catch (error) {
    if (!isCode(error, zookeeper.Exception.NO_NODE)) throw error;
    await call<string>((cb) => client.mkdirp(parent, cb));
    return await create();
  }
}

/** Resolves true once `path` is gone (now or later), false when `deadline` passes first. */
export function waitForDeletion(
  client: zookeeper.Client,
  path: string,
  deadline: number,
): Promise<boolean> {
  return new Promise((resolve, reject) => {
    let settled = false;
    const finish = (gone: boolean) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(gone);
    };
    const timer = setTimeout(() => finish(false), Math.max(0, deadline - performance.now()));
    client.exists(
      path,
      // Any event on the predecessor (deleted, or the session's watches reset): look again.
      (_event: zookeeper.Event) => finish(true),
      (error: Error | zookeeper.Exception | null, stat: zookeeper.Stat | null) => {
        if (error) {
          clearTimeout(timer);
          settled = true;
          reject(error);
        } else if (!stat) finish(true);
      },
    );
  });
}

export function zookeeperRecipeTarget(connect: string, root: string): Target {
  return peerTarget(
    'peer-zk-recipe',
    'ZooKeeper recipe (node-zookeeper-client)',
    async (): Promise<Locker> => {
      const client = await connectZooKeeper(connect);
      return {
        async acquire(name, { waitMs }) {
          const parent = `${root}/${name}`;
          const node = await createContender(client, parent);
          const mine = node.slice(parent.length + 1);
          const deadline = performance.now() + waitMs;
          const release = async () => {
            await call<void>((cb) => client.remove(node, -1, (error) => cb(error, undefined)));
          };
          for (;;) {
            // Same prefix and zero-padded sequence numbers: lexical order is queue order.
            const children = (await call<string[]>((cb) => client.getChildren(parent, cb))).sort();
            const index = children.indexOf(mine);
            if (index === 0) return { release };
            if (index < 0) throw new Error(`contender node ${node} vanished (session lost?)`);
            const gone =
              performance.now() < deadline &&
              (await waitForDeletion(client, `${parent}/${children[index - 1]}`, deadline));
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
  );
}
