import { spawnSync } from 'node:child_process';
import type { ContainerRuntimeClient } from 'testcontainers';
import { findBinary } from './process.js';

/**
 * The Docker engine testcontainers found, and the few things about it that the container
 * provider needs beyond testcontainers: the host the `docker` CLI must talk to (for the
 * synchronous pause/unpause), and removing forgotten containers when the process exits.
 */

/**
 * Our containers always use the host network, so the services are on this machine's loopback
 * and testcontainers' idea of "the Docker host" is never used. Left to itself, inside a
 * container (a CI runner) it looks that host up through the `bridge` network, which an engine
 * started with `--bridge=none` does not have, and gives up on the engine. Unless the user set
 * it, pin it to loopback.
 */
export function pinTestcontainersHost(): void {
  process.env.TESTCONTAINERS_HOST_OVERRIDE ??= '127.0.0.1';
}

let client: Promise<ContainerRuntimeClient> | undefined;

/** testcontainers' client for the engine (loaded on first use, so local runs never load it). */
export function runtimeClient(): Promise<ContainerRuntimeClient> {
  pinTestcontainersHost();
  client ??= import('testcontainers').then((tc) => tc.getContainerRuntimeClient());
  return client;
}

interface ModemOptions {
  socketPath?: string;
  host?: string;
  port?: number | string;
  protocol?: string;
}

/**
 * The `docker --host` value for the engine testcontainers talks to, so the CLI reaches the
 * same one whatever told testcontainers where it is. Undefined for TLS engines: the CLI then
 * reads DOCKER_HOST/DOCKER_CERT_PATH itself.
 */
export async function cliHost(): Promise<string | undefined> {
  const { dockerode } = (await runtimeClient()).container;
  const modem = (dockerode as unknown as { modem: ModemOptions }).modem;
  if (modem.socketPath) return `unix://${modem.socketPath}`;
  if (modem.host && modem.protocol === 'http') return `tcp://${modem.host}:${modem.port ?? 2375}`;
  return undefined;
}

const docker = findBinary('docker');

/**
 * Runs `docker ARGS…` and waits for it: pause and unpause must have taken effect when
 * `ManagedProcess.pause()` returns, and that API is synchronous. False without a docker CLI.
 */
export function dockerSync(host: string | undefined, args: string[]): boolean {
  if (!docker) return false;
  const run = spawnSync(docker, [...(host ? ['--host', host] : []), ...args], {
    encoding: 'utf8',
    timeout: 30_000,
  });
  if (run.status !== 0) {
    throw new Error(`docker ${args.join(' ')} failed: ${(run.stderr || run.stdout).trim()}`);
  }
  return true;
}

const live = new Map<string, string | undefined>();
let exitHookInstalled = false;

/**
 * Remembers a container to remove if the process exits without `stop()` (a crashed test file).
 * testcontainers' reaper does that too, but CI runs it disabled (its image cannot be pulled).
 */
export function trackContainer(id: string, host: string | undefined): void {
  live.set(id, host);
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const [id, host] of live) {
      try {
        dockerSync(host, ['rm', '--force', '--volumes', id]);
      } catch {}
    }
  });
}

export function untrackContainer(id: string): void {
  live.delete(id);
}
