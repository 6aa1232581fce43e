import { connect, createServer, type Server, type Socket } from 'node:net';
import { afterAll, expect } from 'vitest';

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `check` (a test-side observation, not client behaviour) until it holds or time runs out. */
export async function eventually(check: () => Promise<boolean> | boolean, timeoutMs = 3_000) {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (performance.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await sleep(10);
  }
}

/** A unique lock name per test, so tests never see each other's locks. */
export function lockName(label: string): string {
  return `client-test/${label}/${Math.random().toString(36).slice(2, 10)}`;
}

/**
 * Fails the file if any promise rejects unhandled while it runs: a lost lock or a dropped
 * connection must surface as an event, never as an unhandled rejection.
 */
export function failOnUnhandledRejections(): void {
  const seen: unknown[] = [];
  const listener = (reason: unknown) => seen.push(reason);
  process.on('unhandledRejection', listener);
  afterAll(async () => {
    // Give late rejections a turn of the event loop to show up.
    await sleep(50);
    process.off('unhandledRejection', listener);
    expect(seen).toEqual([]);
  });
}

/** A loopback port nothing listens on (connections to it are refused). */
export async function unusedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise((resolve) => server.close(resolve));
  if (!address || typeof address !== 'object') throw new Error('no port');
  return address.port;
}

export interface TcpProxy {
  readonly port: number;
  /**
   * Stops forwarding one direction: `requests` (client→server) or `replies` (server→client,
   * notifications included). `none` forwards both again.
   */
  blackhole(direction: 'requests' | 'replies' | 'none'): void;
  /** Destroys every connection through the proxy, as a network failure would. */
  dropConnections(): void;
  close(): Promise<void>;
}

/** A loopback TCP proxy in front of `targetPort`, for injecting network faults. */
export async function startProxy(targetPort: number): Promise<TcpProxy> {
  const sockets = new Set<Socket>();
  let blackhole: 'requests' | 'replies' | 'none' = 'none';
  const server: Server = createServer((client) => {
    const upstream = connect(targetPort, '127.0.0.1');
    sockets.add(client);
    sockets.add(upstream);
    client.on('data', (chunk) => {
      if (blackhole !== 'requests') upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      if (blackhole !== 'replies') client.write(chunk);
    });
    const end = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('close', end);
    upstream.on('close', end);
    client.on('error', end);
    upstream.on('error', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (!address || typeof address !== 'object') throw new Error('proxy has no port');
  return {
    port: address.port,
    blackhole(direction) {
      blackhole = direction;
    },
    dropConnections() {
      for (const socket of sockets) socket.destroy();
      sockets.clear();
    },
    close() {
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
