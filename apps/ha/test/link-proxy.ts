import { createServer, type Socket, connect as tcpConnect } from 'node:net';
import { listenOnLoopback } from './loopback-listen.js';

/** A TCP link between a dlm server and one backend member that the test can cut and heal. */
export interface LinkProxy {
  /** `127.0.0.1:PORT`: give it to the dlm server in place of the member's address. */
  readonly address: string;
  /** Drops every open connection and every new one until `heal`. */
  cut(): void;
  heal(): void;
  close(): Promise<void>;
}

export async function linkProxy(target: string): Promise<LinkProxy> {
  const [host, port] = target.split(':') as [string, string];
  const sockets = new Set<Socket>();
  let cut = false;
  const track = (socket: Socket) => {
    sockets.add(socket);
    socket.on('error', () => {});
    socket.once('close', () => sockets.delete(socket));
  };
  const server = createServer((downstream) => {
    track(downstream);
    if (cut) {
      downstream.destroy();
      return;
    }
    const upstream = tcpConnect({ host, port: Number(port) });
    track(upstream);
    downstream.pipe(upstream);
    upstream.pipe(downstream);
    downstream.once('close', () => upstream.destroy());
    upstream.once('close', () => downstream.destroy());
  });
  const { port: listening, close } = await listenOnLoopback(server, sockets);
  return {
    address: `127.0.0.1:${listening}`,
    cut() {
      cut = true;
      for (const socket of sockets) socket.destroy();
    },
    heal() {
      cut = false;
    },
    close,
  };
}
