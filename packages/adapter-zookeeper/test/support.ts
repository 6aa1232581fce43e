import { type Client, createClient } from 'node-zookeeper-client';

/**
 * A raw ZooKeeper client of the test's own, connected, to look at the nodes the adapter
 * writes (its session is separate from every backend's under test).
 */
export async function connectRaw(connectString: string): Promise<Client> {
  const raw = createClient(connectString, { sessionTimeout: 4_000 });
  await new Promise<void>((resolve) => {
    raw.once('connected', () => resolve());
    raw.connect();
  });
  return raw;
}
