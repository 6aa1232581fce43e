import { connect } from 'node:net';

/**
 * Whether something accepts TCP connections on `port` of `host` now (one attempt, no retry):
 * the readiness probe for a server a test started as its own process.
 */
export function portOpen(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((done) => {
    const socket = connect(port, host);
    socket.once('connect', () => {
      socket.destroy();
      done(true);
    });
    socket.once('error', () => done(false));
  });
}
