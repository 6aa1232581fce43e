import { createServer, type Socket, connect as tcpConnect } from 'node:net';
import { listenOnLoopback } from './loopback-listen.js';

export interface FailoverProxy {
  readonly port: number;
  /** `ws://127.0.0.1:PORT`: give it to a client as its one server URL. */
  readonly url: string;
  close(): Promise<void>;
}

/**
 * A TCP proxy in front of several dlm servers, the way a load balancer with health checks
 * fronts them: each new connection goes to the first target that accepts it, in the order
 * given. The client only knows one URL (it takes a single `url`), so when its server dies it
 * reconnects here and lands on the next one.
 */
export async function failoverProxy(targetPorts: number[]): Promise<FailoverProxy> {
  const sockets = new Set<Socket>();
  const track = (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  };
  const server = createServer((downstream) => {
    track(downstream);
    downstream.pause();
    downstream.on('error', () => {});
    const tryTarget = (index: number) => {
      const port = targetPorts[index];
      if (port === undefined || downstream.destroyed) {
        downstream.destroy();
        return;
      }
      const upstream = tcpConnect({ host: '127.0.0.1', port });
      track(upstream);
      const refused = () => tryTarget(index + 1);
      upstream.once('error', refused);
      upstream.once('connect', () => {
        upstream.off('error', refused);
        upstream.on('error', () => downstream.destroy());
        downstream.on('close', () => upstream.destroy());
        upstream.on('close', () => downstream.destroy());
        downstream.pipe(upstream);
        upstream.pipe(downstream);
        downstream.resume();
      });
    };
    tryTarget(0);
  });
  const { port, close } = await listenOnLoopback(server, sockets);
  return { port, url: `ws://127.0.0.1:${port}`, close };
}
