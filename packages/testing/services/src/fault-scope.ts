/** A service a fault test may have paused (SIGSTOP): it is resumed before anything else ends. */
export interface PausableService {
  resume(): void;
  stop(graceMs?: number): Promise<void>;
}

/**
 * What a fault test started, ended together in the order that works: every service resumed
 * (a paused one would leave its users' goodbyes hanging), then its users closed (backends, the
 * test's own connections), then the services stopped.
 */
export interface FaultScope {
  /** Keeps `service` for {@link FaultScope.close}; returns it. */
  service<S extends PausableService>(service: S): S;
  /** Keeps `user`, to be ended by `close(user)` before the services stop; returns it. */
  user<U>(user: U, close: (user: U) => unknown): U;
  /** Resumes the services, ends the users, then stops the services (each given `graceMs`). */
  close(): Promise<void>;
}

/**
 * A {@link FaultScope} that closes in the test framework's `afterAll` (vitest's, passed in:
 * this package does not depend on a test framework).
 *
 * @example
 * ```ts sketch
 * const scope = faultScope(afterAll);
 * const redis = scope.service(await startRedis());
 * const backend = scope.user(redisBackend({ url: redis.url }), (b) => b.close());
 * ```
 */
export function faultScope(
  afterAll: (hook: () => Promise<void>) => void,
  graceMs = 1_000,
): FaultScope {
  const services: PausableService[] = [];
  const closers: Array<() => unknown> = [];
  const scope: FaultScope = {
    service(service) {
      services.push(service);
      return service;
    },
    user(user, close) {
      closers.push(() => close(user));
      return user;
    },
    async close() {
      for (const service of services) service.resume();
      await Promise.all(closers.map((close) => close()));
      await Promise.all(services.map((service) => service.stop(graceMs)));
    },
  };
  afterAll(() => scope.close());
  return scope;
}
