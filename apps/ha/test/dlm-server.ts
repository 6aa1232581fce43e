import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { freePort, type ManagedProcess, startProcess } from '@dlm/test-services';

/** The built server: these scenarios run it as an OS process, so kill -9 hits a real server. */
const MAIN = fileURLToPath(new URL('../../server/dist/main.js', import.meta.url));

export interface DlmServer {
  readonly label: string;
  readonly port: number;
  /** `ws://127.0.0.1:PORT` */
  readonly url: string;
  readonly process: ManagedProcess;
}

/** Fails with a clear message when the server was not built (`pnpm test` builds first). */
export function assertServerBuilt(): void {
  if (!existsSync(MAIN)) {
    throw new Error(`${MAIN} is missing: build first (pnpm build; pnpm test does it)`);
  }
}

/** Starts `dlm-server` on a free port with `backendArgs`; resolves once /healthz answers. */
export async function startDlmServer(label: string, backendArgs: string[]): Promise<DlmServer> {
  assertServerBuilt();
  const port = await freePort();
  const process_ = await startProcess({
    name: label,
    command: process.execPath,
    args: [MAIN, '--port', String(port), '--log-level', 'warn', ...backendArgs],
    ready: async () =>
      (await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(1_000) })).ok,
  });
  return { label, port, url: `ws://127.0.0.1:${port}`, process: process_ };
}
