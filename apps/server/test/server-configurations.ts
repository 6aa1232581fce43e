import {
  type PostgresService,
  postgresAvailable,
  type RedisService,
  redisAvailable,
  startPostgres,
  startRedis,
  startZooKeeper,
  tempDir,
  type ZooKeeperService,
  zookeeperAvailable,
} from '@dlm/test-services';
import type { BackendConfig } from '../src/index.js';

/** Whether `configuration` replays `transcript` (it has everything the transcript covers). */
export function replays(
  configuration: ServerConfiguration,
  transcript: { covers: readonly string[] },
): boolean {
  return !configuration.without?.some((feature) => transcript.covers.includes(feature));
}

/**
 * One way the README says to run the server, for tests that must hold on each (the golden
 * transcripts, from both runners): `start` brings up what the backend needs (once per file) and
 * gives the `backendConfig` of a fresh server, `stop` ends it.
 */
export interface ServerConfiguration {
  name: string;
  /** The embedded backend (in process, no service to start). */
  embedded: boolean;
  available: boolean;
  /**
   * What the backend does not have yet, as a transcript's `covers` names it (`lockDelayMs`):
   * the transcripts that cover it are left out of this configuration's replays.
   */
  without?: readonly string[];
  start(): Promise<() => BackendConfig>;
  stop(): Promise<void>;
}

/** A configuration over a service of `@dlm/test-services`, started once, stopped after. */
function overService<S extends { stop(): Promise<void> }>(
  name: string,
  available: () => boolean,
  startService: () => Promise<S>,
  configOf: (service: S) => BackendConfig,
  without?: readonly string[],
): ServerConfiguration {
  let service: S | undefined;
  return {
    name,
    embedded: false,
    ...(without ? { without } : {}),
    // Asked when the file is collected: with CI=true a missing service throws (fails the run).
    available: available(),
    async start() {
      service = await startService();
      const config = configOf(service);
      return () => config;
    },
    async stop() {
      await service?.stop();
    },
  };
}

/**
 * The configurations, the default first: the embedded backend with its journal in a data dir
 * (what `pnpm start` runs), then `--memory`, then the external backends the transcripts hold on
 * (`packages/protocol/transcripts/README.md`): a minimum TTL of at most 100 ms, which leaves out
 * etcd's whole seconds, and the TTL granted as asked, which leaves out Redlock (it grants more,
 * for clock drift).
 */
export function serverConfigurations(): ServerConfiguration[] {
  return [
    {
      name: 'embedded, journaled in a data dir (the default)',
      embedded: true,
      available: true,
      async start() {
        // A fresh data dir per server: nothing carries over from one transcript to the next.
        return () => ({ kind: 'embedded', dataDir: tempDir('transcripts') });
      },
      async stop() {},
    },
    {
      name: 'embedded, in memory (--memory)',
      embedded: true,
      available: true,
      async start() {
        return () => ({ kind: 'embedded', dataDir: null });
      },
      async stop() {},
    },
    overService<RedisService>(
      'Redis',
      redisAvailable,
      () => startRedis(),
      (redis) => ({
        kind: 'redis',
        url: redis.url,
      }),
    ),
    overService<PostgresService>('PostgreSQL', postgresAvailable, startPostgres, (postgres) => ({
      kind: 'postgres',
      url: postgres.url,
    })),
    overService<ZooKeeperService>('ZooKeeper', zookeeperAvailable, startZooKeeper, (zk) => ({
      kind: 'zookeeper',
      connect: zk.connectString,
    })),
  ];
}
