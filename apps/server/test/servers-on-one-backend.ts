import type { LockBackend } from '@dlm/core';
import { type RunningServer, startServer } from '../src/index.js';
import { connect, type Peer } from './ws-peer.js';

/**
 * Several dlm servers on one store, as a deployment behind a load balancer runs them: `server()`
 * starts one on a backend of its own from `open`, `session(on)` opens a greeted WebSocket session
 * on it, and `close()` (for the scope's `afterAll`) closes the sessions, the servers and their
 * backends, in that order.
 */
export function serversOnOneBackend(open: () => LockBackend | Promise<LockBackend>) {
  const backends: LockBackend[] = [];
  const servers: RunningServer[] = [];
  const peers: Peer[] = [];
  return {
    async server(): Promise<RunningServer> {
      const backend = await open();
      backends.push(backend);
      const running = await startServer({ port: 0, backend });
      servers.push(running);
      return running;
    },
    async session(on: RunningServer): Promise<Peer> {
      const peer = await connect(on.url);
      peers.push(peer);
      await peer.hello();
      return peer;
    },
    async close(): Promise<void> {
      for (const peer of peers) peer.close();
      await Promise.all(servers.map((s) => s.close()));
      await Promise.all(backends.map((b) => b.close()));
    },
  };
}
