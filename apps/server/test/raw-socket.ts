import { randomBytes } from 'node:crypto';
import { type Socket, connect as tcpConnect } from 'node:net';
import { SUBPROTOCOL, WS_PATH } from '@dlm/protocol';

/**
 * A WebSocket client written by hand on a TCP socket, for the peers `ws` will not play: one that
 * never answers pings, one that stops reading. It sends masked text frames and reads nothing
 * but the handshake's answer unless asked.
 */
export interface RawPeer {
  socket: Socket;
  /** Sends one masked text frame. */
  sendText(text: string): void;
  /** Resolves when the TCP connection is closed (by either side). */
  closed: Promise<void>;
}

/** Opens a TCP connection and completes the WebSocket handshake. */
export function rawUpgrade(
  port: number,
  options: { host?: string; localAddress?: string; headers?: Record<string, string> } = {},
): Promise<RawPeer> {
  return new Promise((resolve, reject) => {
    const socket = tcpConnect({
      port,
      host: options.host ?? '127.0.0.1',
      ...(options.localAddress ? { localAddress: options.localAddress } : {}),
    });
    const closed = new Promise<void>((done) => socket.once('close', () => done()));
    socket.on('error', () => {});
    socket.once('connect', () => {
      const headers = {
        Host: `127.0.0.1:${port}`,
        Upgrade: 'websocket',
        Connection: 'Upgrade',
        'Sec-WebSocket-Key': randomBytes(16).toString('base64'),
        'Sec-WebSocket-Version': '13',
        'Sec-WebSocket-Protocol': SUBPROTOCOL,
        ...options.headers,
      };
      const head = Object.entries(headers)
        .map(([k, v]) => `${k}: ${v}\r\n`)
        .join('');
      socket.write(`GET ${WS_PATH} HTTP/1.1\r\n${head}\r\n`);
    });
    let buffered = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      const end = buffered.indexOf('\r\n\r\n');
      if (end < 0) return;
      socket.off('data', onData);
      const status = buffered.subarray(0, buffered.indexOf('\r\n')).toString();
      if (!status.includes(' 101 ')) {
        socket.destroy();
        reject(new Error(`upgrade refused: ${status}`));
        return;
      }
      // Whatever follows the handshake stays unread: the caller decides whether to read.
      socket.pause();
      resolve({
        socket,
        closed,
        sendText(text) {
          socket.write(maskedFrame(Buffer.from(text, 'utf8')));
        },
      });
    };
    socket.on('data', onData);
    socket.once('close', () => reject(new Error('closed during the handshake')));
  });
}

/** A client-to-server text frame (FIN, opcode 1), masked as RFC 6455 requires. */
export function maskedFrame(payload: Buffer): Buffer {
  const mask = randomBytes(4);
  const length = payload.length;
  const header =
    length < 126
      ? Buffer.from([0x81, 0x80 | length])
      : length < 65_536
        ? Buffer.from([0x81, 0x80 | 126, length >> 8, length & 0xff])
        : (() => {
            const h = Buffer.alloc(10);
            h[0] = 0x81;
            h[1] = 0x80 | 127;
            h.writeBigUInt64BE(BigInt(length), 2);
            return h;
          })();
  const masked = Buffer.alloc(length);
  for (let i = 0; i < length; i += 1) masked[i] = payload[i]! ^ mask[i % 4]!;
  return Buffer.concat([header, mask, masked]);
}
