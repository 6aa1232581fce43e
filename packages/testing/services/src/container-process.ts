import type { ContainerRuntimeClient, WaitStrategy } from 'testcontainers';
import {
  cliHost,
  dockerSync,
  runtimeClient,
  trackContainer,
  untrackContainer,
} from './docker-engine.js';
import type { ManagedProcess } from './process.js';
import type { ServiceKind } from './provider.js';

/**
 * One service container, started by testcontainers on the host network, behind the same
 * `ManagedProcess` interface as a local process: `kill()` is `docker kill` (SIGKILL) and
 * `start()` is `docker start` of the same container, so its data survives like a process's
 * data dir; `pause()`/`resume()` are `docker pause`/`unpause` (the cgroup freezer: the ports
 * stay open, nothing answers). `stop()` also removes the container: it ends the service.
 */

type DockerContainer = ReturnType<ContainerRuntimeClient['container']['getById']>;

export interface ContainerSpec {
  /** Shown in errors and logs. */
  name: string;
  image: string;
  /** The full command (the image's entrypoint, if any, still runs in front of it). */
  command: string[];
  environment?: Record<string, string>;
  /** Files written into the container before it starts (world-readable). */
  files?: { target: string; content: string }[];
  /** Resolves true once the service answers on its host port. Called repeatedly until it does. */
  ready: () => Promise<boolean>;
  readyTimeoutMs?: number;
}

export interface ContainerProcess extends ManagedProcess {
  readonly containerId: string;
  readonly image: string;
  /** `docker rm --force --volumes`: the container and its data are gone. Safe to call twice. */
  remove(): Promise<void>;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function exitCode(container: DockerContainer): Promise<number | undefined> {
  try {
    const { State } = await container.inspect();
    return State.Running ? undefined : State.ExitCode;
  } catch {
    return -1; // already removed
  }
}

/**
 * Polls `spec.ready` until it says yes, failing early (with the container's output) if the
 * container exits: the readiness of the service itself, not of a port or a log line.
 */
async function waitUntilServing(
  spec: ContainerSpec,
  container: DockerContainer,
  timeoutMs: number,
  output: () => string,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await spec.ready().catch(() => false)) return;
    const code = await exitCode(container);
    if (code !== undefined) {
      await sleep(200); // let the log stream deliver the last lines
      throw new Error(`${spec.name} exited during start-up (exit code ${code}):\n${output()}`);
    }
    if (Date.now() > deadline) {
      throw new Error(`${spec.name} was not ready in ${timeoutMs} ms:\n${output()}`);
    }
    await sleep(100);
  }
}

/** testcontainers' wait strategy for `waitUntilServing`. */
function readiness(spec: ContainerSpec, output: () => string): WaitStrategy {
  let timeoutMs = spec.readyTimeoutMs ?? 60_000;
  let timeoutSet = false;
  const strategy: WaitStrategy = {
    waitUntilReady: (container) => waitUntilServing(spec, container, timeoutMs, output),
    withStartupTimeout(startupTimeoutMs) {
      timeoutMs = startupTimeoutMs;
      timeoutSet = true;
      return strategy;
    },
    isStartupTimeoutSet: () => timeoutSet,
    getStartupTimeout: () => timeoutMs,
  };
  return strategy;
}

/** Starts a container and waits until `spec.ready()` says its service serves. */
export async function startContainer(spec: ContainerSpec): Promise<ContainerProcess> {
  const { GenericContainer } = await import('testcontainers');
  const engine = await runtimeClient();
  const host = await cliHost();
  let log = '';
  const output = () => log;
  // Each start gets a generation, so the end of an old log stream (the container stopped)
  // is not mistaken for the end of the current run.
  let generation = 0;
  let state: 'running' | 'paused' | 'exited' | 'removed' = 'running';
  const follow = (stream: NodeJS.ReadableStream, run: number) => {
    stream.on('data', (chunk: Buffer | string) => {
      log = (log + chunk.toString()).slice(-8_000);
    });
    stream.on('end', () => {
      if (run === generation && state === 'running') state = 'exited';
    });
  };

  const started = await new GenericContainer(spec.image)
    .withNetworkMode('host')
    .withCommand(spec.command)
    .withEnvironment(spec.environment ?? {})
    .withCopyContentToContainer((spec.files ?? []).map((file) => ({ ...file, mode: 0o644 })))
    .withLabels({ 'dlm.test-service': spec.name })
    .withLogConsumer((stream) => follow(stream, generation))
    .withWaitStrategy(readiness(spec, output))
    .start();
  const id = started.getId();
  const container = engine.container.getById(id);
  trackContainer(id, host);

  const kill = async () => {
    if (state === 'removed' || state === 'exited') return;
    if (state === 'paused') dockerSync(host, ['unpause', id]);
    state = 'exited';
    await container.kill({ signal: 'SIGKILL' }).catch(() => {});
    await container.wait({ condition: 'not-running' }).catch(() => {});
  };

  const remove = async () => {
    if (state === 'removed') return;
    if (state === 'paused') dockerSync(host, ['unpause', id]);
    state = 'removed';
    await container.remove({ force: true, v: true }).catch(() => {});
    untrackContainer(id);
  };

  return {
    name: spec.name,
    containerId: id,
    image: spec.image,
    pid: undefined,
    get running() {
      return state === 'running' || state === 'paused';
    },
    output,
    kill,
    remove,
    async stop(graceMs = 5_000) {
      if (state === 'running' || state === 'paused') {
        if (state === 'paused') dockerSync(host, ['unpause', id]);
        state = 'exited';
        await container.stop({ t: Math.ceil(graceMs / 1_000) }).catch(() => {});
      }
      await remove();
    },
    pause() {
      if (state !== 'running') return;
      if (!dockerSync(host, ['pause', id])) {
        throw new Error(`${spec.name}: pause() needs the docker CLI on PATH`);
      }
      state = 'paused';
    },
    resume() {
      if (state !== 'paused') return;
      dockerSync(host, ['unpause', id]);
      state = 'running';
    },
    async start() {
      if (state === 'removed') throw new Error(`${spec.name} was stopped and removed`);
      if (state !== 'exited') throw new Error(`${spec.name} is already running`);
      generation += 1;
      const since = Math.floor(Date.now() / 1_000);
      await container.start();
      state = 'running';
      follow(await engine.container.logs(container, { since }), generation);
      try {
        await waitUntilServing(spec, container, spec.readyTimeoutMs ?? 60_000, output);
      } catch (error) {
        await kill();
        throw error;
      }
    },
  };
}

/**
 * Each service's image: the variable that names another (a locally built dlm-test/…:local,
 * a mirror), and the official image used when it is unset or blank.
 */
const images: Record<ServiceKind, { env: string; fallback: string }> = {
  redis: { env: 'DLM_TEST_REDIS_IMAGE', fallback: 'redis:7' },
  etcd: { env: 'DLM_TEST_ETCD_IMAGE', fallback: 'gcr.io/etcd-development/etcd:v3.5.17' },
  zookeeper: { env: 'DLM_TEST_ZK_IMAGE', fallback: 'zookeeper:3.8' },
};

/** The image `kind`'s containers run (see `images`). */
export function serviceImage(kind: ServiceKind): string {
  const { env, fallback } = images[kind];
  return process.env[env]?.trim() || fallback;
}

/** Removes the members' containers (and their data): how a service in containers stops. */
export async function removeAll(members: { readonly process: ContainerProcess }[]): Promise<void> {
  await Promise.all(members.map((member) => member.process.remove()));
}
