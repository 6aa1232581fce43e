import type { Socket } from 'node:net';
import type { WebSocket } from 'ws';

/**
 * Sends `text` as one unmasked, unfragmented WebSocket text frame (RFC 6455 §5.2), header and
 * payload in a single buffer and a single socket write.
 *
 * `ws.send` writes a frame as two chunks (header, then the string) under a cork, so every reply
 * cost a `writev` with a string to encode in C++ — the largest item in the server's profile.
 * Writing the frame ourselves is equivalent because the server turns compression off
 * (`perMessageDeflate: false`): `ws` then queues nothing, and its own frames (ping, close) are
 * also written to the socket synchronously, so frames keep their order. `bufferedAmount` still
 * counts what the socket has not flushed.
 */
export function sendTextFrame(ws: WebSocket, text: string): void {
  const socket = (ws as unknown as { _socket?: Socket })._socket;
  if (!socket) {
    ws.send(text);
    return;
  }
  const length = Buffer.byteLength(text);
  const headerLength = length < 126 ? 2 : length < 65_536 ? 4 : 10;
  const frame = Buffer.allocUnsafe(headerLength + length);
  frame[0] = 0x81; // FIN, opcode 1 (text)
  if (length < 126) {
    frame[1] = length;
  } else if (length < 65_536) {
    frame[1] = 126;
    frame.writeUInt16BE(length, 2);
  } else {
    frame[1] = 127;
    frame.writeUInt32BE(Math.floor(length / 2 ** 32), 2);
    frame.writeUInt32BE(length >>> 0, 6);
  }
  frame.write(text, headerLength, 'utf8');
  socket.write(frame);
}
