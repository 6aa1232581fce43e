/**
 * A meddling client (issue 22): it holds nothing, but reads every lock's token and owner with
 * `lock.get` (they are public) and then tries to release and extend the lease with that token,
 * without its key, and to acquire it by naming the holder's owner. Each try is recorded like a
 * holder's operation, so the checker's S4 sees them: none may ever succeed. It speaks the wire
 * protocol itself (not through @dlm/client, which only ever presents its own leases' keys).
 */
import { randomBytes } from 'node:crypto';
import WebSocket from 'ws';
import type { HistoryWriter, OpName, Phase } from './history.js';
import { sleep } from './time.js';
import type { WorkerConfig } from './worker-config.js';

interface Reply {
  result?: Record<string, unknown>;
  error?: { data?: { code?: string }; message?: string };
}

/** One connection at a time, opened again after a fault closed it. */
function rawConnection(url: string, timeoutMs: number) {
  let socket: Promise<WebSocket> | undefined;
  let seq = 0;
  const pending = new Map<number, (reply: Reply) => void>();

  function open(): Promise<WebSocket> {
    const ws = new WebSocket(url, ['dlm.v1.json']);
    const opened = new Promise<WebSocket>((resolve, reject) => {
      ws.once('open', () => resolve(ws));
      ws.once('error', reject);
    });
    ws.on('message', (data) => {
      const frame = JSON.parse(data.toString()) as Reply & { id?: number };
      if (typeof frame.id === 'number') pending.get(frame.id)?.(frame);
    });
    ws.on('close', () => {
      if (socket === ready) socket = undefined;
    });
    ws.on('error', () => {});
    const ready = opened.then(async (open) => {
      await send(open, 'session.hello', { client: { name: 'dlm-faults meddler', version: '1' } });
      return open;
    });
    ready.catch(() => {
      if (socket === ready) socket = undefined;
      ws.terminate();
    });
    return ready;
  }

  function send(ws: WebSocket, method: string, params: unknown): Promise<Reply> {
    seq += 1;
    const id = seq;
    return new Promise<Reply>((resolve, reject) => {
      const timer = setTimeout(() => {
        pending.delete(id);
        reject(new Error(`${method}: no reply in ${timeoutMs} ms`));
      }, timeoutMs);
      pending.set(id, (reply) => {
        clearTimeout(timer);
        pending.delete(id);
        resolve(reply);
      });
      ws.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }));
    });
  }

  return {
    async call(method: string, params: unknown): Promise<Reply> {
      socket ??= open();
      return send(await socket, method, params);
    },
    close() {
      void socket?.then((ws) => ws.close()).catch(() => {});
    },
  };
}

export async function runMeddler(
  config: WorkerConfig,
  history: HistoryWriter,
  stopping: () => boolean,
): Promise<void> {
  const connection = rawConnection(config.url, config.requestTimeoutMs);
  let opSeq = 0;

  /** Records one try: ok only if the server let it through (which S4 flags). */
  async function attempt(f: OpName, name: string, token: string, params: object) {
    const op = ++opSeq;
    history.record({ kind: 'op', op, f, type: 'invoke', name, token });
    let reply: Reply;
    try {
      reply = await connection.call(`lock.${f}`, params);
    } catch (error) {
      history.record({ kind: 'op', op, f, type: 'info', name, token, error: String(error) });
      return undefined;
    }
    if (reply.result) {
      history.record({
        kind: 'op',
        op,
        f,
        type: 'ok',
        name,
        token,
        ...(f === 'release' ? { released: true } : {}),
      });
    } else {
      const code = reply.error?.data?.code ?? 'UNKNOWN';
      // UNAVAILABLE may or may not have reached the backend: unknown, as for any client.
      const type: Phase = code === 'UNAVAILABLE' ? 'info' : 'fail';
      history.record({ kind: 'op', op, f, type, name, token, error: `${code}` });
    }
    return reply;
  }

  while (!stopping()) {
    const name = config.names[Math.floor(Math.random() * config.names.length)]!;
    let seen: Reply;
    try {
      seen = await connection.call('lock.get', { name });
    } catch {
      await sleep(100);
      continue;
    }
    const held = seen.result?.held === true;
    if (held) {
      const token = String(seen.result!.token);
      const owner = String(seen.result!.owner);
      const tries: Array<() => Promise<unknown>> = [
        () => attempt('release', name, token, { name, token }),
        () => attempt('extend', name, token, { name, token, ttlMs: config.ttlMs }),
        // A guessed key is no better than none.
        () =>
          attempt('release', name, token, {
            name,
            token,
            leaseKey: randomBytes(16).toString('base64url'),
          }),
      ];
      await tries[Math.floor(Math.random() * tries.length)]!();
      // Naming the holder's owner must not share its lease: a try-lock, never recorded as a
      // grant unless it is one. A grant of a free lock is a real lease: given back at once.
      try {
        const impostor = await connection.call('lock.acquire', {
          name,
          owner,
          ttlMs: config.ttlMs,
        });
        if (impostor.result) {
          const granted = String(impostor.result.token);
          if (granted === token) {
            history.record({
              kind: 'op',
              op: ++opSeq,
              f: 'extend',
              type: 'invoke',
              name,
              token,
            });
            // The holder's lease handed to an impostor acts as an extend by a non-holder: S4.
            history.record({ kind: 'op', op: opSeq, f: 'extend', type: 'ok', name, token });
          }
          await connection.call('lock.release', {
            name,
            token: granted,
            leaseKey: impostor.result.leaseKey,
          });
        }
      } catch {}
    }
    await sleep(10 + Math.random() * 40);
  }
  connection.close();
}
