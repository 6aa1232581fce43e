import * as zookeeper from 'node-zookeeper-client';

/** A node-zookeeper-client call with a callback, as a promise. */
export function call<T>(
  run: (callback: (error: Error | zookeeper.Exception | null, value: T) => void) => void,
) {
  return new Promise<T>((resolve, reject) => {
    run((error, value) => (error ? reject(error) : resolve(value)));
  });
}

/** One connected ZooKeeper session as the ZooKeeper peers use it (10 s session timeout). */
export async function connectZooKeeper(connect: string): Promise<zookeeper.Client> {
  const client = zookeeper.createClient(connect, { sessionTimeout: 10_000, spinDelay: 100 });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('ZooKeeper connect timed out')), 15_000);
    client.once('connected', () => {
      clearTimeout(timer);
      resolve();
    });
    client.connect();
  });
  return client;
}
