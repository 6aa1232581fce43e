import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import { sendTextFrame } from '../src/text-frame.js';

// The server writes reply frames itself (one buffer, one write); a standard client must read
// every one of them exactly as `ws.send` would have framed it, whatever its length.
describe('sendTextFrame', () => {
  let wss: WebSocketServer;
  let url: string;

  beforeAll(async () => {
    wss = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false });
    await new Promise<void>((resolve) => wss.once('listening', resolve));
    url = `ws://127.0.0.1:${(wss.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    await new Promise<void>((resolve) => wss.close(() => resolve()));
  });

  it('frames payloads of every length class, multi-byte characters included, in order', async () => {
    const texts = [
      '',
      'x',
      'a'.repeat(125),
      'é'.repeat(63), // 126 bytes in UTF-8: the 16-bit length form
      'b'.repeat(65_535),
      'c'.repeat(65_536), // the 64-bit length form
      `{"name":"ünïcødé ✓ 🔒","n":${'9'.repeat(200_000)}}`,
    ];
    wss.once('connection', (socket) => {
      for (const text of texts) sendTextFrame(socket, text);
      // A frame ws writes itself after ours still arrives after them.
      socket.send('tail');
    });
    const client = new WebSocket(url);
    const received: string[] = await new Promise((resolve, reject) => {
      const frames: string[] = [];
      client.on('message', (data, isBinary) => {
        if (isBinary) reject(new Error('binary frame'));
        frames.push(data.toString());
        if (frames.length === texts.length + 1) resolve(frames);
      });
      client.on('error', reject);
    });
    client.close();
    expect(received).toEqual([...texts, 'tail']);
  });
});
