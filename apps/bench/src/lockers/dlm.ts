import { type AcquireOptions, createClient, type DlmClient, isDlmError } from '@dlm/client';
import { startServerProcess } from '../server-process.js';
import { type Locker, type RunningTarget, type Target, WaitTimeout } from './locker.js';

/**
 * `DLM_BENCH_CLIENT_FRAMES=single` runs the dlm clients one message per frame (the client's
 * `frames` option), for an A/B of multi-message frames in one build; default: the client's own.
 */
const FRAMES = process.env.DLM_BENCH_CLIENT_FRAMES === 'single' ? 'single' : undefined;

/** One simulated client: one `@dlm/client` (one WebSocket session). */
export async function dlmLocker(url: string, pingIntervalMs?: number): Promise<Locker> {
  const client: DlmClient = createClient({
    url,
    name: '@dlm/bench',
    ...(pingIntervalMs === undefined ? {} : { pingIntervalMs }),
    ...(FRAMES ? { frames: FRAMES } : {}),
  });
  await client.connect();
  return {
    async acquire(name, { ttlMs, waitMs, mode, limit }) {
      // `mode` and `limit` as the client passes them on (a client before shared modes would
      // drop them: the probe in shared-modes.ts then finds two shared holders impossible).
      const options = {
        ttlMs,
        waitMs,
        ...(mode === undefined ? {} : { mode }),
        ...(limit === undefined ? {} : { limit }),
      } as AcquireOptions;
      const lease = await client.acquire(name, options).catch((error: unknown) => {
        throw isDlmError(error, 'LOCK_HELD') ? new WaitTimeout(name) : error;
      });
      return {
        async release() {
          await lease.release();
        },
      };
    },
    close: () => client.close(),
  };
}

export interface DlmTargetOptions {
  id: string;
  label: string;
  /** The server's backend flags; a function so that temp dirs are made per start. */
  backendArgs: () => string[];
  profileDir?: string | undefined;
}

/** dlm: a server process on the given backend, driven over WebSocket by the TS client. */
export function dlmTarget(options: DlmTargetOptions): Target {
  let starts = 0;
  return {
    id: options.id,
    label: options.label,
    kind: 'dlm',
    async start(): Promise<RunningTarget> {
      starts += 1;
      const server = await startServerProcess({
        backendArgs: options.backendArgs(),
        profileDir: options.profileDir,
        profileName: `${options.id}-${starts}`,
      });
      return {
        serverPid: server.pid,
        connect: () => dlmLocker(server.url),
        stop: () => server.stop(),
      };
    },
  };
}
