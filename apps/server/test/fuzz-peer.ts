import { SUBPROTOCOL } from '@dlm/protocol';
import WebSocket from 'ws';
import { frameProblem, resultProblem } from './frame-schema.js';

/** A reply frame, or how the connection ended while the request waited for one. */
export type Outcome =
  | { reply: Record<string, any>; closed?: undefined }
  | { reply?: undefined; closed: number };

/**
 * A protocol peer for fuzzing: correlates replies by id (frames whose id the server cannot read
 * are answered with `id: null`, in order), and records every way the server's output breaks the
 * protocol instead of throwing, so a property can assert that there were none.
 */
export interface FuzzPeer {
  ws: WebSocket;
  /** Sends a frame; resolves with the reply that has `id` (null: the next id-less reply). */
  send(data: string | Buffer, id: string | number | null, method?: string): Promise<Outcome>;
  /** Sends a well-formed request with a fresh id. */
  request(method: string, params?: unknown): Promise<Outcome>;
  /** What the server sent that the protocol does not allow. */
  problems: string[];
  notifications: number;
  /** The close code, once closed. */
  closed: Promise<number>;
  isOpen(): boolean;
  close(): Promise<void>;
}

const key = (id: string | number) => `${typeof id}:${id}`;

export async function fuzzPeer(
  url: string,
  options: WebSocket.ClientOptions = {},
): Promise<FuzzPeer> {
  const ws = new WebSocket(url, [SUBPROTOCOL], options);
  const problems: string[] = [];
  const byId = new Map<string, { method: string | undefined; resolve: (o: Outcome) => void }>();
  const byNull: Array<(o: Outcome) => void> = [];
  let notifications = 0;
  let seq = 0;
  let closeCode: number | undefined;
  const closed = new Promise<number>((resolve) => {
    ws.on('close', (code) => {
      closeCode = code;
      for (const waiter of byId.values()) waiter.resolve({ closed: code });
      byId.clear();
      for (const resolveNull of byNull.splice(0)) resolveNull({ closed: code });
      resolve(code);
    });
  });
  ws.on('error', () => {});
  ws.on('message', (data, isBinary) => {
    if (isBinary) {
      problems.push('the server sent a binary frame');
      return;
    }
    let frame: Record<string, any>;
    try {
      frame = JSON.parse(data.toString());
    } catch {
      problems.push(`not JSON: ${data.toString().slice(0, 200)}`);
      return;
    }
    const report = (problem: string | undefined) => {
      if (problem) problems.push(`${problem}: ${data.toString().slice(0, 300)}`);
    };
    report(frameProblem(frame));
    if (!('id' in frame)) {
      notifications += 1;
      return;
    }
    if (frame.error?.data?.code === 'INTERNAL') report('INTERNAL error');
    if (frame.id === null) {
      const resolveNull = byNull.shift();
      if (resolveNull) resolveNull({ reply: frame });
      else problems.push(`unexpected id-less reply: ${data.toString().slice(0, 200)}`);
      return;
    }
    const waiter = byId.get(key(frame.id));
    if (!waiter) {
      problems.push(`reply to no pending request: ${data.toString().slice(0, 200)}`);
      return;
    }
    byId.delete(key(frame.id));
    report(resultProblem(waiter.method, frame.result));
    waiter.resolve({ reply: frame });
  });
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });

  const peer: FuzzPeer = {
    ws,
    problems,
    get notifications() {
      return notifications;
    },
    closed,
    isOpen: () => closeCode === undefined && ws.readyState === WebSocket.OPEN,
    send(data, id, method) {
      if (closeCode !== undefined) return Promise.resolve({ closed: closeCode });
      const outcome = new Promise<Outcome>((resolve) => {
        if (id === null) byNull.push(resolve);
        else {
          if (byId.has(key(id))) throw new Error(`id ${id} is already pending`);
          byId.set(key(id), { method, resolve });
        }
      });
      ws.send(data, { binary: typeof data !== 'string' });
      return outcome;
    },
    request(method, params) {
      seq += 1;
      const id = `r${seq}`;
      return peer.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }), id, method);
    },
    async close() {
      if (closeCode !== undefined) return;
      ws.close();
      await closed;
    },
  };
  return peer;
}
