import type { Server, Socket } from 'node:net';

/** A proxy's listening side: its port, and `close` that drops its open connections too. */
export interface Listening {
  readonly port: number;
  close(): Promise<void>;
}

/** Listens on a free loopback port; `close` destroys every socket in `sockets`, then the server. */
export function listenOnLoopback(server: Server, sockets: Set<Socket>): Promise<Listening> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      resolve({
        port: typeof address === 'object' && address ? address.port : 0,
        close: () =>
          new Promise<void>((done) => {
            for (const socket of sockets) socket.destroy();
            server.close(() => done());
          }),
      });
    });
  });
}
