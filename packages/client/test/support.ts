import { connect, createServer, type Server, type Socket } from 'node:net';
import { embeddedBackend } from '@dlm/adapter-embedded';
import { pendingAfter, sleep, until } from '@dlm/conformance';
import type { LockBackend } from '@dlm/core';
import { type RunningServer, type ServerOptions, startServer } from '@dlm/server';
import { afterAll, beforeAll, expect } from 'vitest';
import { createClient, type DlmClient } from '../src/index.js';

export { pendingAfter, sleep };

/** Polls `check` (a test-side observation, not client behaviour) until it holds or time runs out. */
export function eventually(
  check: () => Promise<boolean> | boolean,
  timeoutMs = 3_000,
): Promise<void> {
  return until(check, { timeoutMs, intervalMs: 10 });
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

/** Reconnect quickly, so a test that drops connections does not wait out the default backoff. */
export const fastReconnect = { initialDelayMs: 20, maxDelayMs: 200 };

export type ClientOptions = Partial<Parameters<typeof createClient>[0]>;

/** A server on an embedded backend, both started before the enclosing scope's tests. */
export interface ServedBackend {
  readonly backend: LockBackend;
  readonly server: RunningServer;
}

/** Starts the server before the scope's tests and closes it, then the backend, after them. */
class ServedScope implements ServedBackend {
  #backend: LockBackend | undefined;
  #server: RunningServer | undefined;

  constructor(options: Omit<ServerOptions, 'port' | 'backend'>) {
    beforeAll(async () => {
      this.#backend = await embeddedBackend();
      this.#server = await startServer({ ...options, port: 0, backend: this.#backend });
    });
    afterAll(async () => {
      await this.#server?.close();
      await this.#backend?.close();
    });
  }

  get backend(): LockBackend {
    return started(this.#backend);
  }

  get server(): RunningServer {
    return started(this.#server);
  }
}

/**
 * Starts a {@link ServedBackend} before the enclosing scope's tests (file or `describe`) and
 * closes the server, then the backend, after them: after the scope's own `afterAll`s, which run
 * in reverse order of registration, so clients made in the scope close first.
 */
export function useServer(options: Omit<ServerOptions, 'port' | 'backend'> = {}): ServedBackend {
  return new ServedScope(options);
}

function started<T>(value: T | undefined): T {
  if (value === undefined) throw new Error('the server starts in beforeAll');
  return value;
}

/** A server on an embedded backend with a fault-injecting proxy in front, for the enclosing scope. */
export interface ProxiedServer {
  readonly backend: LockBackend;
  readonly server: RunningServer;
  readonly proxy: TcpProxy;
  /** A client of the server (direct unless `options.url` says otherwise), closed with the scope. */
  client(options?: ClientOptions): DlmClient;
  /** A client through the proxy that reconnects fast, on the scope's proxy client options. */
  viaProxy(options?: ClientOptions): DlmClient;
  /** A client of a port nothing listens on, with a 300 ms request timeout. */
  clientOfNoServer(): Promise<DlmClient>;
}

/** The served backend, and a proxy and clients on top, closed before the server. */
class ProxiedScope extends ServedScope implements ProxiedServer {
  #proxy: TcpProxy | undefined;
  readonly #clients: DlmClient[] = [];
  readonly #proxyOptions: ClientOptions;

  constructor(proxyOptions: ClientOptions) {
    super({});
    this.#proxyOptions = proxyOptions;
    beforeAll(async () => {
      this.#proxy = await startProxy(this.server.port);
    });
    afterAll(async () => {
      await Promise.all(this.#clients.map((c) => c.close()));
      await this.#proxy?.close();
    });
  }

  get proxy(): TcpProxy {
    return started(this.#proxy);
  }

  // Arrow functions: the tests take them off the scope (`const { client } = env`).
  readonly client = (options: ClientOptions = {}): DlmClient => {
    const created = createClient({ url: this.server.url, ...options });
    this.#clients.push(created);
    return created;
  };

  readonly viaProxy = (options: ClientOptions = {}): DlmClient =>
    this.client({
      url: `ws://127.0.0.1:${this.proxy.port}`,
      reconnect: fastReconnect,
      ...this.#proxyOptions,
      ...options,
    });

  readonly clientOfNoServer = async (): Promise<DlmClient> => {
    const port = await unusedPort();
    return this.client({
      url: `ws://127.0.0.1:${port}`,
      requestTimeoutMs: 300,
      reconnect: fastReconnect,
    });
  };
}

/**
 * Starts a {@link ProxiedServer} before the enclosing scope's tests (file or `describe`) and
 * closes its clients, proxy, server and backend, in that order, after them. The scope fails if a
 * promise rejects unhandled meanwhile ({@link failOnUnhandledRejections}). `proxyOptions` are
 * the defaults of every `viaProxy` client (a test's own options win).
 */
export function useProxiedServer(proxyOptions: ClientOptions = {}): ProxiedServer {
  failOnUnhandledRejections();
  return new ProxiedScope(proxyOptions);
}
