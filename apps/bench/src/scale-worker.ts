import { createClient, type DlmClient, type Lease, type WebSocketConstructor } from '@dlm/client';
import WebSocket from 'ws';
import type { FromWorker, ToWorker } from './workloads/scale-protocol.js';

/**
 * A child process of the scale workload: holds a share of the sessions (one `@dlm/client`
 * each, all from one source address) and acquires locks on them when told. Several of these
 * spread the connections over processes (file descriptors, event-loop time) and over source
 * addresses (ephemeral ports). Held leases are never released: the parent stops the server,
 * then kills this process.
 */

const clients: DlmClient[] = [];
const leases: Lease[] = [];
let cursor = 0;
let lockSerial = 0;

/** `ws` with every connection made from `localAddress`. */
function boundWebSocket(localAddress: string): WebSocketConstructor {
  class Bound extends WebSocket {
    constructor(url: string, protocols?: string | string[]) {
      super(url, protocols, { localAddress });
    }
  }
  return Bound as unknown as WebSocketConstructor;
}

function send(message: FromWorker): void {
  process.send?.(message);
}

/** Runs `task(i)` for i in 0..count-1 with at most `limit` in flight; counts the failures. */
async function pool(
  count: number,
  limit: number,
  task: (index: number) => Promise<void>,
): Promise<{ ok: number; failed: number; error?: string }> {
  let next = 0;
  let ok = 0;
  let failed = 0;
  let firstError: string | undefined;
  // Past a few failures something is wrong (a limit, the server gone): stop rather than let
  // every remaining task wait out its own timeout.
  const maxFailures = Math.max(10, Math.ceil(count / 100));
  const lane = async () => {
    while (next < count && failed < maxFailures) {
      const index = next++;
      try {
        await task(index);
        ok += 1;
      } catch (error) {
        failed += 1;
        firstError ??= error instanceof Error ? error.message : String(error);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, count) }, lane));
  failed += count - ok - failed;
  return firstError === undefined ? { ok, failed } : { ok, failed, error: firstError };
}

process.on('message', (message: ToWorker) => {
  if (message.type === 'connect') {
    // Pings off: 10,000 sessions pinging every 10 s would be 1,000 requests/s of background
    // load in the p99 measurement; a real fleet's ping rate is a deployment choice.
    const { url, localAddress } = message;
    const WebSocket = localAddress === undefined ? undefined : boundWebSocket(localAddress);
    void pool(message.sessions, 64, async () => {
      const client = createClient({
        url,
        pingIntervalMs: 0,
        name: 'bench-scale',
        ...(WebSocket ? { WebSocket } : {}),
      });
      await client.connect();
      clients.push(client);
    }).then((result) => send({ type: 'connected', ...result }));
  } else if (message.type === 'acquire') {
    const { count, ttlMs, prefix } = message;
    void pool(count, 256, async () => {
      const client = clients[cursor++ % clients.length]!;
      const lease = await client.acquire(`${prefix}:${process.pid}:${lockSerial++}`, { ttlMs });
      leases.push(lease);
    }).then((result) => {
      const last = leases.at(-1);
      const sample = last && { name: last.name, token: String(last.token) };
      send({ type: 'acquired', ...result, ...(sample ? { sample } : {}) });
    });
  }
});

process.on('disconnect', () => process.exit(0));
