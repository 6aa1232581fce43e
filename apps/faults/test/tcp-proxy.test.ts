import { connect, createServer, type Server, type Socket } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createTcpProxy, type TcpProxy } from '../src/tcp-proxy.js';

/** An upstream that echoes every byte and remembers what it received. */
let echo: Server;
let echoPort: number;
let received = '';
const sockets = new Set<Socket>();

beforeAll(async () => {
  echo = createServer((socket) => {
    sockets.add(socket);
    socket.on('data', (chunk) => {
      received += chunk.toString();
      socket.write(chunk);
    });
    socket.on('error', () => {});
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => echo.listen(0, '127.0.0.1', resolve));
  echoPort = (echo.address() as { port: number }).port;
});
afterAll(async () => {
  for (const socket of sockets) socket.destroy();
  await new Promise((resolve) => echo.close(resolve));
});

let proxy: TcpProxy;
afterEach(async () => {
  await proxy?.close();
  received = '';
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A client through the proxy that collects replies and notes how its connection ended. */
async function client(port: number) {
  const socket = connect({ host: '127.0.0.1', port });
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  const state = { replies: '', error: undefined as string | undefined, closed: false };
  socket.on('data', (chunk) => {
    state.replies += chunk.toString();
  });
  socket.on('error', (error: NodeJS.ErrnoException) => {
    state.error = error.code;
  });
  socket.on('close', () => {
    state.closed = true;
  });
  return { socket, state };
}

describe('TCP proxy', () => {
  it('passes bytes both ways', async () => {
    proxy = await createTcpProxy({ targetPort: echoPort });
    const { socket, state } = await client(proxy.port);
    socket.write('hello');
    await expect.poll(() => state.replies).toBe('hello');
    socket.destroy();
  });

  it('blackhole: the request arrives, the reply is lost; heal closes the broken stream', async () => {
    proxy = await createTcpProxy({ targetPort: echoPort });
    const { socket, state } = await client(proxy.port);
    proxy.setMode({ kind: 'blackhole' });
    socket.write('ping');
    await expect.poll(() => received).toBe('ping');
    await sleep(200);
    expect(state.replies).toBe('');
    proxy.heal();
    await expect.poll(() => state.closed).toBe(true);
  });

  it('drop: nothing arrives either way, new connections do not reach the target', async () => {
    proxy = await createTcpProxy({ targetPort: echoPort });
    const before = sockets.size;
    proxy.setMode({ kind: 'drop' });
    const { socket, state } = await client(proxy.port);
    socket.write('lost');
    await sleep(200);
    expect(received).toBe('');
    expect(state.replies).toBe('');
    expect(sockets.size).toBe(before);
    proxy.heal();
    await expect.poll(() => state.closed).toBe(true);
    // After the heal, new connections work again.
    const fresh = await client(proxy.port);
    fresh.socket.write('back');
    await expect.poll(() => fresh.state.replies).toBe('back');
    fresh.socket.destroy();
  });

  it('delay: every chunk is held, in order', async () => {
    proxy = await createTcpProxy({ targetPort: echoPort });
    const { socket, state } = await client(proxy.port);
    proxy.setMode({ kind: 'delay', meanMs: 100, jitterMs: 50 });
    const started = performance.now();
    const expected: string[] = [];
    for (let i = 0; i < 20; i++) {
      expected.push(`<${i}>`);
      socket.write(`<${i}>`);
      await sleep(2);
    }
    await expect.poll(() => state.replies, { timeout: 5_000 }).toBe(expected.join(''));
    // There and back: at least two delays of ≥ 50 ms.
    expect(performance.now() - started).toBeGreaterThanOrEqual(100);
    socket.destroy();
  });

  it('reset: open connections get an RST, and so do new ones while it lasts', async () => {
    proxy = await createTcpProxy({ targetPort: echoPort });
    const { state } = await client(proxy.port);
    proxy.setMode({ kind: 'reset' });
    await expect.poll(() => state.error).toBe('ECONNRESET');
    const fresh = connect({ host: '127.0.0.1', port: proxy.port });
    const ended = await new Promise<string>((resolve) => {
      fresh.on('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? 'error'));
      fresh.on('close', () => resolve('closed'));
    });
    expect(['ECONNRESET', 'closed']).toContain(ended);
    expect(proxy.connections).toBe(0);
  });
});
