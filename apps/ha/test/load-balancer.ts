import { fileURLToPath } from 'node:url';
import {
  findBinary,
  freePort,
  type ManagedProcess,
  serviceAvailable,
  startProcess,
} from '@dlm/test-services';

/** The shipped configuration: the tests run exactly the file the deploy README shows. */
const CONFIG = fileURLToPath(new URL('../../../deploy/haproxy/haproxy.cfg', import.meta.url));

/** Whether HAProxy is installed (with CI=true its absence fails the run). */
export function haproxyAvailable(): boolean {
  return serviceAvailable('haproxy (Debian package haproxy)', findBinary('haproxy') !== null);
}

export interface LoadBalancer {
  /** `ws://127.0.0.1:PORT`: the one address clients get. */
  readonly url: string;
  readonly process: ManagedProcess;
  /** HAProxy's view of each server (`dlm1`…): UP, DOWN, or a transition such as `UP 1/2`. */
  states(): Promise<Record<string, string>>;
  /** Resolves once `server` is reported in `state` (UP or DOWN), with how long that took. */
  waitFor(server: string, state: 'UP' | 'DOWN', timeoutMs: number): Promise<number>;
}

/** Starts Debian's HAProxy on `deploy/haproxy/haproxy.cfg` in front of three dlm servers. */
export async function startLoadBalancer(
  serverPorts: [number, number, number],
): Promise<LoadBalancer> {
  const port = await freePort();
  const statsPort = await freePort();
  const stats = `http://127.0.0.1:${statsPort}/stats;csv`;
  const process_ = await startProcess({
    name: 'haproxy',
    command: findBinary('haproxy') ?? 'haproxy',
    args: ['-f', CONFIG, '-db'],
    env: {
      ...process.env,
      DLM_LB_BIND: `127.0.0.1:${port}`,
      DLM_LB_STATS: `127.0.0.1:${statsPort}`,
      DLM_SERVER_1: `127.0.0.1:${serverPorts[0]}`,
      DLM_SERVER_2: `127.0.0.1:${serverPorts[1]}`,
      DLM_SERVER_3: `127.0.0.1:${serverPorts[2]}`,
    },
    ready: async () => (await fetch(stats, { signal: AbortSignal.timeout(1_000) })).ok,
  });
  async function states(): Promise<Record<string, string>> {
    const csv = await (await fetch(stats, { signal: AbortSignal.timeout(2_000) })).text();
    const [header, ...rows] = csv.trim().split('\n');
    const columns = (header ?? '').replace(/^# /, '').split(',');
    const at = (name: string) => columns.indexOf(name);
    const result: Record<string, string> = {};
    for (const row of rows) {
      const cells = row.split(',');
      if (cells[at('pxname')] === 'dlm_servers' && cells[at('svname')]?.startsWith('dlm')) {
        result[cells[at('svname')]!] = cells[at('status')] ?? '';
      }
    }
    return result;
  }
  return {
    url: `ws://127.0.0.1:${port}`,
    process: process_,
    states,
    async waitFor(server, state, timeoutMs) {
      const started = performance.now();
      for (;;) {
        if ((await states())[server] === state) return performance.now() - started;
        if (performance.now() - started > timeoutMs) {
          throw new Error(`HAProxy did not report ${server} ${state} within ${timeoutMs} ms`);
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    },
  };
}
