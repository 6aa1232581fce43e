import { Cluster, Redis } from 'ioredis';
import { nameKeys } from '../src/index.js';

/** Where the probe reads: one server's URL, a master found by Sentinel, or a cluster's nodes. */
export type ProbeTarget =
  | { url: string }
  | { master: () => Promise<{ host: string; port: number }> }
  | { nodes: string[] };

async function connect(target: ProbeTarget): Promise<Redis | Cluster> {
  if ('nodes' in target) {
    const cluster = new Cluster(
      target.nodes.map((node) => {
        const [host, port] = node.split(':');
        return { host: host ?? '127.0.0.1', port: Number(port) };
      }),
      { lazyConnect: true },
    );
    await cluster.connect();
    return cluster;
  }
  const client =
    'url' in target
      ? new Redis(target.url, { lazyConnect: true, maxRetriesPerRequest: 0 })
      : new Redis({ ...(await target.master()), lazyConnect: true, maxRetriesPerRequest: 0 });
  await client.connect();
  return client;
}

/**
 * The conformance suite's `fairQueue` hook: the ids in `name`'s fair queue, oldest first (live
 * or not), read on a connection of its own.
 */
export function queueProbe(target: ProbeTarget, prefix = 'dlm:') {
  return {
    async entries(name: string): Promise<string[]> {
      const client = await connect(target);
      try {
        return await client.zrange(nameKeys(prefix, name).queue, 0, -1);
      } finally {
        client.disconnect();
      }
    },
  };
}
