import { afterAll, beforeAll } from 'vitest';

/** Anything a test starts and must stop again: a test service, a cluster target. */
export interface Stoppable {
  stop(): Promise<unknown>;
}

/**
 * Starts a service before the enclosing scope's tests (file or `describe`) and stops it after
 * them. The returned function gives the started service to the tests and to the target's hooks.
 *
 * @example
 * const redis = useService(() => startRedis());
 * runConformance('redis', { backend: async () => redisBackend({ url: redis().url }) });
 */
export function useService<S extends Stoppable>(start: () => Promise<S>): () => S;
/** The same for a service stopped another way (`stop`): `close()`, a bounded `stop(ms)`. */
export function useService<S>(
  start: () => Promise<S>,
  stop: (service: S) => Promise<unknown>,
): () => S;
export function useService<S>(
  start: () => Promise<S>,
  stop: (service: S) => Promise<unknown> = (service) => (service as Stoppable).stop(),
): () => S {
  let service: S | undefined;
  beforeAll(async () => {
    service = await start();
  });
  afterAll(async () => {
    if (service) await stop(service);
  });
  return () => {
    if (!service) throw new Error('the service starts in beforeAll');
    return service;
  };
}

/** A service process that can be killed and started again with its data. */
export interface Restartable {
  kill(): Promise<void>;
  start(): Promise<void>;
}

/**
 * Kills `service` (SIGKILL: no clean shutdown) and starts it again on its data: a target's
 * `restart` hook for the durability group.
 */
export async function killAndStart(service: Restartable): Promise<void> {
  await service.kill();
  await service.start();
}

/**
 * Keeps what it is handed (backends, clients) and closes it all after the enclosing scope's
 * tests (file or `describe`). Call it after the scope's `useService`s: after-hooks run in
 * reverse order, so what it keeps is closed before the services stop.
 *
 * @example
 * const closing = closedAfterAll<LockBackend>();
 * const open = () => closing(etcdBackend({ endpoints: etcd().endpoints }));
 */
export function closedAfterAll<C extends { close(): Promise<unknown> }>(): (closable: C) => C {
  const kept: C[] = [];
  afterAll(() => Promise.all(kept.map((closable) => closable.close())));
  return (closable) => {
    kept.push(closable);
    return closable;
  };
}
