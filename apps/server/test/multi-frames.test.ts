import { SUBPROTOCOL } from '@dlm/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { type RunningServer, startServer } from '../src/index.js';
import { frameProblem } from './frame-schema.js';

// Multi-message frames (SPEC.md, "Several messages per frame"): asked for in session.hello,
// then a frame either way may be an array of independent messages, each answered on its own.

/** A raw peer that keeps every frame as it came (to count frames) and every message in it. */
interface FramePeer {
  ws: WebSocket;
  /** Every frame received, parsed: an object, or an array of messages. */
  frames: unknown[];
  /** Every message received, in order, with when it arrived. */
  messages: Array<{ message: Record<string, any>; at: number }>;
  send(value: unknown): void;
  /** The message answering `id` (null: the next id-less error not yet taken). */
  reply(id: string | number | null, timeoutMs?: number): Promise<Record<string, any>>;
  closed: Promise<number>;
}

let server: RunningServer;
beforeAll(async () => {
  server = await startServer({ port: 0 });
});
afterAll(async () => {
  await server.close();
});

async function peer(url = server.url): Promise<FramePeer> {
  const ws = new WebSocket(url, [SUBPROTOCOL]);
  const frames: unknown[] = [];
  const messages: FramePeer['messages'] = [];
  const taken = new Set<number>();
  ws.on('message', (data) => {
    const frame = JSON.parse(data.toString()) as unknown;
    frames.push(frame);
    const at = performance.now();
    for (const message of Array.isArray(frame) ? frame : [frame]) {
      const problem = frameProblem(message as Record<string, any>);
      if (problem) throw new Error(`off-schema message (${problem}): ${JSON.stringify(message)}`);
      messages.push({ message: message as Record<string, any>, at });
    }
  });
  const closed = new Promise<number>((resolve) => ws.on('close', (code) => resolve(code)));
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  return {
    ws,
    frames,
    messages,
    closed,
    send: (value) => ws.send(typeof value === 'string' ? value : JSON.stringify(value)),
    async reply(id, timeoutMs = 5_000) {
      const deadline = performance.now() + timeoutMs;
      for (;;) {
        const index = messages.findIndex(
          ({ message }, i) => !taken.has(i) && 'id' in message && message.id === id,
        );
        if (index >= 0) {
          taken.add(index);
          return messages[index]!.message;
        }
        if (performance.now() > deadline) throw new Error(`no reply with id ${id}`);
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    },
  };
}

const request = (id: number | string, method: string, params: Record<string, unknown> = {}) => ({
  jsonrpc: '2.0',
  id,
  method,
  params,
});

/** A peer whose hello asked for multi-message frames (and got them). */
async function multiPeer(): Promise<FramePeer> {
  const p = await peer();
  p.send(request(0, 'session.hello', { frames: 'multi' }));
  const hello = await p.reply(0);
  expect(hello.result.frames).toBe('multi');
  return p;
}

const uniqueName = (label: string) => `multi/${label}-${Date.now()}-${Math.random()}`;

describe('multi-message frames', () => {
  it('a frame of N requests gets N answers, ready together in one array frame', async () => {
    const p = await multiPeer();
    const before = p.frames.length;
    const name = uniqueName('n');
    p.send([
      request(1, 'session.ping'),
      request(2, 'lock.acquire', { name, ttlMs: 5_000, owner: 'o' }),
      request(3, 'lock.get', { name }),
      request(4, 'session.ping'),
      request('five', 'session.ping'),
    ]);
    const replies = await Promise.all([1, 2, 3, 4, 'five'].map((id) => p.reply(id)));
    expect(replies.map((r) => r.id)).toEqual([1, 2, 3, 4, 'five']);
    expect(replies[1]!.result).toMatchObject({ name, owner: 'o', mode: 'exclusive' });
    // Started in array order; on the embedded backend the get after the acquire sees it held.
    expect(replies[2]!.result).toMatchObject({ name, held: true, owner: 'o' });
    // The embedded backend answers all five in the turn they arrived: one frame, each reply in
    // the order it was ready (pings first: they have fewer steps).
    expect(p.frames.slice(before)).toHaveLength(1);
    const ids = (p.frames[before] as Array<{ id: unknown }>).map((m) => String(m.id));
    expect(ids.sort()).toEqual(['1', '2', '3', '4', 'five']);
    p.ws.close();
  });

  it('a waiting acquire in a frame does not hold back the other replies of that frame', async () => {
    const holder = await multiPeer();
    const name = uniqueName('wait');
    holder.send(request(1, 'lock.acquire', { name, ttlMs: 10_000, owner: 'h' }));
    const held = (await holder.reply(1)).result;
    const p = await multiPeer();
    const sentAt = performance.now();
    p.send([
      request(1, 'lock.acquire', { name, ttlMs: 5_000, waitMs: 5_000, owner: 'w' }),
      request(2, 'session.ping'),
      request(3, 'lock.get', { name }),
    ]);
    const [ping, get] = [await p.reply(2), await p.reply(3)];
    expect(ping.result).toEqual({});
    expect(get.result).toMatchObject({ held: true, owner: 'h' });
    const answered = p.messages.find(({ message }) => message.id === 3)!.at;
    expect(answered - sentAt).toBeLessThan(1_000);
    expect(p.messages.some(({ message }) => message.id === 1)).toBe(false);
    holder.send(request(2, 'lock.release', { name, token: held.token }));
    expect((await holder.reply(2)).result).toEqual({ released: true });
    const granted = await p.reply(1);
    expect(granted.result).toMatchObject({ name, owner: 'w' });
    expect(BigInt(granted.result.token)).toBeGreaterThan(BigInt(held.token));
    holder.ws.close();
    p.ws.close();
  });

  it('notifications ride with replies, in the order they were sent', async () => {
    const p = await multiPeer();
    const name = uniqueName('watch');
    p.send(request(1, 'lock.watch', { name }));
    expect((await p.reply(1)).result).toMatchObject({ held: false });
    p.send(request(2, 'lock.acquire', { name, ttlMs: 5_000, owner: 'o' }));
    await p.reply(2);
    const changed = p.messages.find(({ message }) => message.method === 'lock.changed');
    expect(changed?.message.params).toMatchObject({ name, held: true, owner: 'o' });
  });

  it('bad frames: an empty array, non-object members, not JSON, oversize', async () => {
    const p = await multiPeer();
    p.send([]);
    expect((await p.reply(null)).error.data).toMatchObject({ code: 'INVALID_REQUEST' });
    p.send([7, request(1, 'session.ping'), 'x', null, [request(2, 'session.ping')]]);
    expect((await p.reply(1)).result).toEqual({});
    const refused = [await p.reply(null), await p.reply(null), await p.reply(null)];
    const last = await p.reply(null);
    for (const reply of [...refused, last]) {
      expect(reply.error).toMatchObject({ code: -32600, data: { code: 'INVALID_REQUEST' } });
    }
    expect(last.error.message).toMatch(/must be a JSON object, not an array/);
    // The nested array's request was not served.
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(p.messages.some(({ message }) => message.id === 2)).toBe(false);
    p.send('[{"jsonrpc":"2.0",');
    expect((await p.reply(null)).error.data).toMatchObject({ code: 'PARSE_ERROR' });
    // A member with a bad method or params is answered with its own id.
    p.send([request(3, 'lock.nope'), { jsonrpc: '2.0', id: 4, method: 'lock.get', params: 5 }]);
    expect((await p.reply(3)).error.data.code).toBe('METHOD_NOT_FOUND');
    expect((await p.reply(4)).error.data).toMatchObject({
      code: 'INVALID_PARAMS',
      field: 'params',
    });
    p.send(`[${JSON.stringify(request(5, 'session.ping'))},${' '.repeat(65_536)}]`);
    expect(await p.closed).toBe(1009);
  });

  it('each message counts against maxInflight and the message rate', async () => {
    const limited = await startServer({
      port: 0,
      limits: { maxInflight: 2, messagesPerSecond: 1, messageBurst: 6 },
    });
    try {
      const p = await peer(limited.url);
      p.send(request(0, 'session.hello', { frames: 'multi' }));
      await p.reply(0);
      const name = uniqueName('inflight');
      p.send([
        request(1, 'lock.acquire', { name, ttlMs: 1_000, owner: 'a' }),
        request(2, 'lock.acquire', { name, ttlMs: 1_000, waitMs: 100, owner: 'b' }),
        request(3, 'lock.acquire', { name, ttlMs: 1_000, waitMs: 100, owner: 'c' }),
      ]);
      expect((await p.reply(1)).result).toMatchObject({ owner: 'a' });
      expect((await p.reply(3)).error.data.code).toBe('LIMIT_EXCEEDED');
      expect((await p.reply(2)).error.data.code).toBe('LOCK_HELD');
      // Burst 6: hello and three took four tokens; of five pings in one frame, two get in.
      p.send([1, 2, 3, 4, 5].map((i) => request(10 + i, 'session.ping')));
      const codes = await Promise.all(
        [11, 12, 13, 14, 15].map(async (id) => (await p.reply(id)).error?.data.code ?? 'OK'),
      );
      expect(codes.filter((code) => code === 'OK')).toHaveLength(2);
      expect(codes.filter((code) => code === 'LIMIT_EXCEEDED')).toHaveLength(3);
      p.ws.close();
    } finally {
      await limited.close();
    }
  });
});

describe('a v1 client that does not ask', () => {
  it('gets no frames member, one object per frame, and an array frame is INVALID_REQUEST', async () => {
    const p = await peer();
    p.send(request(0, 'session.hello', {}));
    expect((await p.reply(0)).result).not.toHaveProperty('frames');
    p.send([request(1, 'session.ping'), request(2, 'session.ping')]);
    const refused = await p.reply(null);
    expect(refused.error).toMatchObject({ code: -32600, data: { code: 'INVALID_REQUEST' } });
    for (let id = 3; id < 8; id += 1) p.send(request(id, 'session.ping'));
    for (let id = 3; id < 8; id += 1) expect((await p.reply(id)).result).toEqual({});
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(p.frames.every((frame) => !Array.isArray(frame))).toBe(true);
    expect(p.messages.some(({ message }) => message.id === 1 || message.id === 2)).toBe(false);
    p.ws.close();
  });

  it('an unknown frames value is ignored, not refused', async () => {
    const p = await peer();
    p.send(request(0, 'session.hello', { frames: 'msgpack' }));
    const hello = await p.reply(0);
    expect(hello.result.sessionId).toEqual(expect.any(String));
    expect(hello.result).not.toHaveProperty('frames');
    p.ws.close();
  });
});
