import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { freePort, type ManagedProcess, startContainer, startProcess } from '@dlm/test-services';

/** The built server: these scenarios run it as an OS process, so kill -9 hits a real server. */
const MAIN = fileURLToPath(new URL('../../server/dist/main.js', import.meta.url));

export interface DlmServer {
  readonly label: string;
  readonly port: number;
  /** `ws://127.0.0.1:PORT` */
  readonly url: string;
  /** `kill()` is SIGKILL (`docker kill` for a container); `start()` runs the same server again. */
  readonly process: ManagedProcess;
  /** Ends the server for good (a container is removed). */
  close(): Promise<void>;
}

/** How a scenario starts a dlm server: `backendArgs` are the server's own flags. */
export type StartDlmServer = (label: string, backendArgs: string[]) => Promise<DlmServer>;

/** Fails with a clear message when the server was not built (`pnpm test` builds first). */
export function assertServerBuilt(): void {
  if (!existsSync(MAIN)) {
    throw new Error(`${MAIN} is missing: build first (pnpm build; pnpm test does it)`);
  }
}

const healthz = (port: number) => async () =>
  (await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(1_000) })).ok;

/** The flags every scenario's server runs with, a process or a container alike. */
const serverFlags = (port: number, backendArgs: string[]) => [
  '--port',
  String(port),
  '--log-level',
  'warn',
  ...backendArgs,
];

const dlmServer = (
  label: string,
  port: number,
  process: ManagedProcess,
  close: () => Promise<void>,
): DlmServer => ({ label, port, url: `ws://127.0.0.1:${port}`, process, close });

/** Starts `dlm-server` on a free port with `backendArgs`; resolves once /healthz answers. */
export async function startDlmServer(label: string, backendArgs: string[]): Promise<DlmServer> {
  assertServerBuilt();
  const port = await freePort();
  const process_ = await startProcess({
    name: label,
    command: process.execPath,
    args: [MAIN, ...serverFlags(port, backendArgs)],
    ready: healthz(port),
  });
  return dlmServer(label, port, process_, () => process_.kill());
}

/**
 * Starts each server as a container of `image` (the repository's Dockerfile) on the host
 * network: the image's entrypoint runs with the same flags, bound to loopback (the image's
 * default 0.0.0.0 would need tokens).
 */
export function containerServers(image: string): StartDlmServer {
  return async (label, backendArgs) => {
    const port = await freePort();
    const container = await startContainer({
      name: `${label} [${image}]`,
      image,
      command: serverFlags(port, backendArgs),
      environment: { DLM_HOST: '127.0.0.1' },
      ready: healthz(port),
    });
    return dlmServer(label, port, container, () => container.remove());
  };
}

/** The variable naming the image whose containers the load-balancer scenarios run. */
export const SERVER_IMAGE_ENV = 'DLM_HA_SERVER_IMAGE';

/**
 * How the load-balancer scenarios start their servers: containers of the image that
 * DLM_HA_SERVER_IMAGE names (CI's Docker stage), built processes otherwise.
 */
export function serversFromEnv(): { how: string; start: StartDlmServer } {
  const image = process.env[SERVER_IMAGE_ENV]?.trim();
  if (image) return { how: `containers of ${image}`, start: containerServers(image) };
  return { how: 'processes', start: startDlmServer };
}
