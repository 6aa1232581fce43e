import { embeddedBackend } from '@dlm/adapter-embedded';
import type { LockBackend } from '@dlm/core';
import { afterAll, beforeAll } from 'vitest';
import { type RunningServer, startServer } from '../src/index.js';
import { openSession, type Peer } from './ws-peer.js';

/**
 * A test file's server on an embedded backend the test also holds (to observe the backend
 * directly), and what its tests open besides: all closed after the file.
 */
export interface EmbeddedServerFixture {
  /** The backend under `server`; set once the file's `beforeAll` has run. */
  readonly backend: LockBackend;
  /** Set once the file's `beforeAll` has run. */
  readonly server: RunningServer;
  /** Every peer `session` opened, and those a test connects itself: closed first. */
  readonly peers: Peer[];
  /** Servers a test starts for itself: closed after the file's peers, before `server`. */
  readonly servers: RunningServer[];
  /** Backends a test makes for itself: closed last, with `backend`. */
  readonly backends: LockBackend[];
  /** A session (hello done) on `on`, the file's server by default. */
  session(on?: RunningServer): Promise<Peer>;
}

function started<T>(value: T | undefined, what: string): T {
  if (value === undefined) throw new Error(`the fixture's ${what} is used before beforeAll ran`);
  return value;
}

/** Registers the file's `beforeAll` and `afterAll` that start and close the fixture. */
export function embeddedServerFixture(): EmbeddedServerFixture {
  let backend: LockBackend | undefined;
  let server: RunningServer | undefined;
  const peers: Peer[] = [];
  const servers: RunningServer[] = [];
  const backends: LockBackend[] = [];

  beforeAll(async () => {
    backend = await embeddedBackend();
    server = await startServer({ port: 0, backend });
  });
  afterAll(async () => {
    for (const peer of peers) peer.close();
    await Promise.all(servers.map((s) => s.close()));
    await server?.close();
    await Promise.all([...(backend ? [backend] : []), ...backends].map((b) => b.close()));
  });

  return {
    get backend() {
      return started(backend, 'backend');
    },
    get server() {
      return started(server, 'server');
    },
    peers,
    servers,
    backends,
    async session(on = started(server, 'server')) {
      const peer = await openSession(on.url);
      peers.push(peer);
      return peer;
    },
  };
}

/**
 * `backend` with its answers to grants (`answerMs`) or its events (`eventMs`) delivered that much
 * later: what a journaled backend (a grant answers after its fsync) or a networked one (events
 * and answers on two connections) does to the order in which the server hears of a grant.
 */
export function lateBackend(
  backend: LockBackend,
  delays: { answerMs?: number; eventMs?: number },
): LockBackend {
  const later = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
  return new Proxy(backend, {
    get(target, property, receiver) {
      if (property === 'tryAcquire' && delays.answerMs) {
        return async (request: Parameters<LockBackend['tryAcquire']>[0]) => {
          const result = await target.tryAcquire(request);
          await later(delays.answerMs!);
          return result;
        };
      }
      if (property === 'watch' && delays.eventMs) {
        return (name: string, listener: Parameters<LockBackend['watch']>[1]) =>
          target.watch(name, (event) => {
            setTimeout(() => listener(event), delays.eventMs);
          });
      }
      const value = Reflect.get(target, property, receiver);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}
