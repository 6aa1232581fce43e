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

const sequence = (child: string) => child.slice(-10);

/** The children in queue order (the suffix is the parent's sequence counter, zero-padded). */
async function queue(client: zookeeper.Client, parent: string): Promise<string[]> {
  const children = await call<string[]>((cb) => client.getChildren(parent, cb));
  return children.sort((a, b) =>
    sequence(a) < sequence(b) ? -1 : sequence(a) > sequence(b) ? 1 : 0,
  );
}

/**
 * What `mine` waits for in `children`: null when it holds the lock. A writer (every contender
 * of the plain recipe is one) waits for its predecessor, a reader for the last writer ahead.
 */
function blocker(children: string[], mine: string, write: boolean): string | null {
  const index = children.indexOf(mine);
  if (index < 0) throw new Error(`contender node ${mine} vanished (session lost?)`);
  if (write) return index === 0 ? null : children[index - 1]!;
  const writers = children.slice(0, index).filter((child) => child.startsWith('write-'));
  return writers.at(-1) ?? null;
}

/**
 * One acquire of `root/name`: a contender node named `prefix…`, then a watch on what it waits
 * for, again until it holds. When `waitMs` is over first, its node is removed and WaitTimeout
 * thrown.
 */
export async function contend(
  client: zookeeper.Client,
  root: string,
  name: string,
  waitMs: number,
  { prefix, write }: { prefix: string; write: boolean },
): Promise<{ release(): Promise<void> }> {
  const parent = `${root}/${name}`;
  const node = await createContender(client, parent, prefix);
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
}

/** One contender: the lock recipe's sequential nodes under `root`, on its own session. */
function recipeLocker(client: zookeeper.Client, root: string): Locker {
  return {
    acquire: (name, { waitMs }) =>
      contend(client, root, name, waitMs, { prefix: 'lock-', write: true }),
    async close() {
      client.close();
    },
  };
}

export function zookeeperRecipeTarget(connect: string, root: string): Target {
  return peerTarget('peer-zk-recipe', 'ZooKeeper recipe (node-zookeeper-client)', async () =>
    recipeLocker(await connectZooKeeper(connect), root),
  );
}
