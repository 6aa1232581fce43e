import { SUBPROTOCOL } from '@dlm/protocol';
import WebSocket from 'ws';
import { frameProblem, resultProblem } from './frame-schema.js';

/** A raw protocol peer for tests: sends frames, and collects replies and notifications. */
export interface Peer {
  ws: WebSocket;
  /** Sends a request and resolves with the whole reply frame. */
  call(method: string, params?: unknown): Promise<Record<string, any>>;
  /** Sends raw text or bytes and resolves with the next frame that has the given id. */
  raw(data: string | Buffer, id?: unknown): Promise<Record<string, any>>;
  /** `session.hello`, with `auth` when given; rejects unless it succeeds. */
  hello(auth?: string): Promise<Record<string, any>>;
  notifications: Array<Record<string, any>>;
  nextNotification(method: string, timeoutMs?: number): Promise<Record<string, any>>;
  /** What `pick` finds, asked again as frames arrive (it reads `notifications` as it likes). */
  arrived<T>(pick: () => T | undefined, timeoutMs?: number): Promise<T>;
  closed: Promise<{ code: number; reason: string }>;
  close(): void;
}

export async function connect(
  url: string,
  protocols: string[] | undefined = [SUBPROTOCOL],
  options: WebSocket.ClientOptions = {},
): Promise<Peer> {
  const ws = new WebSocket(url, protocols, options);
  const frames: Array<Record<string, any>> = [];
  const notifications: Array<Record<string, any>> = [];
  const waiters: Array<() => void> = [];
  const closed = new Promise<{ code: number; reason: string }>((resolve) => {
    ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() }));
  });
  ws.on('message', (data) => {
    const frame = JSON.parse(data.toString()) as Record<string, any>;
    // Every frame the server sends must match the published schema.
    const problem = frameProblem(frame);
    if (problem) throw new Error(`frame does not match the protocol schema (${problem}): ${data}`);
    if (frame.id === undefined) notifications.push(frame);
    else frames.push(frame);
    for (const wake of waiters.splice(0)) wake();
  });
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  let seq = 0;

  async function waitFor<T>(pick: () => T | undefined, timeoutMs = 5_000): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = pick();
      if (found !== undefined) return found;
      if (Date.now() > deadline) throw new Error('timed out waiting for a frame');
      await new Promise<void>((resolve) => {
        waiters.push(resolve);
        setTimeout(resolve, 50);
      });
    }
  }

  function take(id: unknown) {
    return waitFor(() => {
      const index = frames.findIndex((f) => f.id === id);
      return index < 0 ? undefined : frames.splice(index, 1)[0];
    }, 30_000);
  }

  const peer: Peer = {
    ws,
    notifications,
    closed,
    call(method, params) {
      seq += 1;
      const id = seq;
      ws.send(JSON.stringify({ jsonrpc: '2.0', id, method, params: params ?? {} }));
      return take(id).then((reply) => {
        if (resultProblem(method, reply.result)) {
          throw new Error(
            `${method} result does not match the schema: ${JSON.stringify(reply.result)}`,
          );
        }
        return reply;
      });
    },
    raw(data, id = null) {
      ws.send(data);
      return take(id);
    },
    async hello(auth?: string) {
      const reply = await peer.call('session.hello', {
        client: { name: 'test', version: '0' },
        ...(auth === undefined ? {} : { auth }),
      });
      if (!reply.result) throw new Error(`hello failed: ${JSON.stringify(reply)}`);
      return reply.result;
    },
    nextNotification(method, timeoutMs = 5_000) {
      return waitFor(() => {
        const index = notifications.findIndex((n) => n.method === method);
        return index < 0 ? undefined : notifications.splice(index, 1)[0];
      }, timeoutMs);
    },
    arrived: waitFor,
    close: () => ws.close(),
  };
  return peer;
}

/** A peer that has said `session.hello`, as most tests need before their first call. */
export async function openSession(url: string): Promise<Peer> {
  const peer = await connect(url);
  await peer.hello();
  return peer;
}

/**
 * How a WebSocket upgrade ends: `open` (closed again at once), `http <status>` when the server
 * refuses it, or `error <message>` when the connection fails (TLS, refused, reset).
 */
export function upgradeOutcome(
  url: string,
  options: WebSocket.ClientOptions = {},
): Promise<string> {
  return new Promise((resolve) => {
    const ws = new WebSocket(url, [SUBPROTOCOL], options);
    ws.on('open', () => {
      ws.close();
      resolve('open');
    });
    ws.on('unexpected-response', (_req, res) => resolve(`http ${res.statusCode}`));
    ws.on('error', (error) => resolve(`error ${error.message}`));
  });
}
