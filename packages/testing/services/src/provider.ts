import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { pinTestcontainersHost } from './docker-engine.js';
import { findBinary, serviceAvailable } from './process.js';

/**
 * The one place that decides where a test's Redis, etcd or ZooKeeper comes from:
 *
 * - `external`: the user's own server, from `DLM_TEST_REDIS_URL`, `DLM_TEST_ETCD_ENDPOINTS`
 *   or `DLM_TEST_ZK_CONNECT` (never killed or paused);
 * - `local`: processes of the installed binaries (redis-server, etcd, java + ZooKeeper jars);
 * - `docker`: containers started by testcontainers (images from `DLM_TEST_REDIS_IMAGE`,
 *   `DLM_TEST_ETCD_IMAGE`, `DLM_TEST_ZK_IMAGE`), on the host network.
 *
 * `DLM_TEST_SERVICES=external|local|docker` picks one for every service; unset (or `auto`),
 * each service takes the first that works, in that order.
 */

export type ServiceKind = 'redis' | 'etcd' | 'zookeeper';
export type ServiceProvider = 'external' | 'local' | 'docker';

export const PROVIDER_ENV = 'DLM_TEST_SERVICES';

const externalEnv: Record<ServiceKind, string> = {
  redis: 'DLM_TEST_REDIS_URL',
  etcd: 'DLM_TEST_ETCD_ENDPOINTS',
  zookeeper: 'DLM_TEST_ZK_CONNECT',
};

const binaryName: Record<ServiceKind, string> = {
  redis: 'redis-server',
  etcd: 'etcd',
  zookeeper: 'java and the ZooKeeper jars',
};

function env(name: string): string | undefined {
  const value = process.env[name]?.trim();
  return value ? value : undefined;
}

function explicitProvider(): ServiceProvider | undefined {
  const value = env(PROVIDER_ENV)?.toLowerCase();
  if (value === undefined || value === 'auto') return undefined;
  if (value === 'external' || value === 'local' || value === 'docker') return value;
  throw new Error(`${PROVIDER_ENV}=${value}: expected external, local, docker or auto`);
}

function localBinaryPresent(kind: ServiceKind): boolean {
  if (kind === 'redis') return findBinary('redis-server') !== null;
  if (kind === 'etcd') return findBinary('etcd') !== null;
  if (findBinary('java') === null) return false;
  try {
    return readdirSync('/usr/share/java').some((file) => /^zookeeper.*\.jar$/.test(file));
  } catch {
    return false;
  }
}

let engineReachable: boolean | undefined;

/**
 * Whether testcontainers finds a Docker engine that answers (DOCKER_HOST, its
 * ~/.testcontainers.properties, the default socket, …). Asked once per process, in a child
 * process so that the answer is synchronous: test files decide `skipIf` at load time.
 */
export function dockerAvailable(): boolean {
  if (engineReachable !== undefined) return engineReachable;
  let entry: string;
  try {
    entry = createRequire(import.meta.url).resolve('testcontainers');
  } catch {
    engineReachable = false;
    return false;
  }
  pinTestcontainersHost();
  const probe = spawnSync(
    process.execPath,
    [
      '-e',
      `require(${JSON.stringify(entry)}).getContainerRuntimeClient().then(() => process.exit(0), () => process.exit(1))`,
    ],
    { stdio: 'ignore', timeout: 20_000 },
  );
  engineReachable = probe.status === 0;
  return engineReachable;
}

/**
 * Where `kind` comes from, or undefined when nothing can provide it (automatic choice only).
 * An explicit `DLM_TEST_SERVICES` is returned as given; whether it works shows when the
 * service starts (or in `providerAvailable`).
 */
export function chooseProvider(kind: ServiceKind): ServiceProvider | undefined {
  const explicit = explicitProvider();
  const external = env(externalEnv[kind]) !== undefined;
  if (explicit === 'external' && !external) {
    throw new Error(`${PROVIDER_ENV}=external but ${externalEnv[kind]} is not set`);
  }
  if (explicit === 'local' && external) {
    // The local starters would quietly use the external server: refuse the contradiction.
    throw new Error(
      `${PROVIDER_ENV}=local and ${externalEnv[kind]} are both set: unset one of them`,
    );
  }
  if (explicit) return explicit;
  if (external) return 'external';
  if (localBinaryPresent(kind)) return 'local';
  if (dockerAvailable()) return 'docker';
  return undefined;
}

/**
 * Whether tests that need `kind` can run. Missing outside CI: false (they skip, and say why).
 * Missing with CI=true: throws, never a silent skip.
 */
export function providerAvailable(kind: ServiceKind): boolean {
  const provider = chooseProvider(kind);
  if (provider === 'external') return true;
  if (provider === 'local') return serviceAvailable(binaryName[kind], localBinaryPresent(kind));
  if (provider === 'docker') return serviceAvailable('a Docker engine', dockerAvailable());
  return serviceAvailable(
    `${binaryName[kind]} (or a Docker engine, or ${externalEnv[kind]})`,
    false,
  );
}

/** Whether the service can be killed, paused and restarted (not the user's own server). */
export function providerManaged(kind: ServiceKind): boolean {
  return chooseProvider(kind) !== 'external';
}
