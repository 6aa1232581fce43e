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
  /**
   * Sends one frame of several messages (multi-message frames); resolves with each message's
   * reply, found by `ids[i]` (null: the next id-less reply, in order).
   */
  sendMany(
    data: string,
    ids: Array<string | number | null>,
    methods: Array<string | undefined>,
  ): Promise<Outcome[]>;
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

/**
 * `multi`: the peer's hello asks for multi-message frames, so an array frame from the server
 * counts as its messages; without it an array frame is a problem.
 */
export async function fuzzPeer(
  url: string,
  options: WebSocket.ClientOptions = {},
  multi = false,
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
    let parsed: unknown;
    try {
      parsed = JSON.parse(data.toString());
    } catch {
      problems.push(`not JSON: ${data.toString().slice(0, 200)}`);
      return;
    }
    if (!Array.isArray(parsed)) handle(parsed as Record<string, any>);
    else if (!multi || parsed.length === 0)
      problems.push(`unasked or empty array frame: ${data.toString().slice(0, 200)}`);
    else for (const message of parsed) handle(message as Record<string, any>);
  });

  /** One message the server sent: a notification, or the reply a request waits for. */
  function handle(frame: Record<string, any>): void {
    const text = JSON.stringify(frame);
    const report = (problem: string | undefined) => {
      if (problem) problems.push(`${problem}: ${text.slice(0, 300)}`);
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
      else problems.push(`unexpected id-less reply: ${text.slice(0, 200)}`);
      return;
    }
    const waiter = byId.get(key(frame.id));
    if (!waiter) {
      problems.push(`reply to no pending request: ${text.slice(0, 200)}`);
      return;
    }
    byId.delete(key(frame.id));
    report(resultProblem(waiter.method, frame.result));
    waiter.resolve({ reply: frame });
  }
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });

  function awaitReply(id: string | number | null, method: string | undefined): Promise<Outcome> {
    return new Promise<Outcome>((resolve) => {
      if (id === null) byNull.push(resolve);
      else {
        if (byId.has(key(id))) throw new Error(`id ${id} is already pending`);
        byId.set(key(id), { method, resolve });
      }
    });
  }

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
      const outcome = awaitReply(id, method);
      ws.send(data, { binary: typeof data !== 'string' });
      return outcome;
    },
    sendMany(data, ids, methods) {
      if (closeCode !== undefined) return Promise.resolve(ids.map(() => ({ closed: closeCode! })));
      const outcomes = ids.map((id, i) => awaitReply(id, methods[i]));
      ws.send(data);
      return Promise.all(outcomes);
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
