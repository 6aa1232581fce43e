import { connect, createServer, type Server, type Socket } from 'node:net';

/**
 * What the proxy does to the bytes between the two sides of each connection. "Down" is the
 * side that connected to the proxy (a client, or the dlm server talking to a backend); "up" is
 * the target.
 *
 * - `pass`: forwards everything.
 * - `drop`: a partition. Bytes in both directions are discarded and new connections never
 *   reach the target. At `heal`, connections that lost bytes are closed: their streams have a
 *   hole no protocol can resume from (TCP itself would have killed them in a long partition).
 * - `blackhole`: one way. Requests reach the target, replies are discarded. Closed at `heal`
 *   like `drop`.
 * - `delay`: each chunk is held `meanMs ± jitterMs` (uniform), order kept per direction.
 * - `reset`: every connection is reset (RST), and so is each new one while the mode lasts.
 */
export type ProxyMode =
  | { kind: 'pass' }
  | { kind: 'drop' }
  | { kind: 'blackhole' }
  | { kind: 'delay'; meanMs: number; jitterMs: number }
  | { kind: 'reset' };

export interface TcpProxy {
  readonly port: number;
  readonly mode: ProxyMode;
  setMode(mode: ProxyMode): void;
  /** Back to `pass`: closes the connections a drop or blackhole broke; delayed bytes still go. */
  heal(): void;
  /** Connections open through the proxy now. */
  readonly connections: number;
  close(): Promise<void>;
}

interface Direction {
  to: Socket;
  queue: { at: number; chunk: Buffer }[];
  timer: ReturnType<typeof setTimeout> | undefined;
  lastAt: number;
}

interface Pair {
  down: Socket;
  up: Socket | undefined;
  /** Bytes were discarded: the stream cannot continue after a heal. */
  broken: boolean;
  toUp: Direction | undefined;
  toDown: Direction;
}

function reset(socket: Socket | undefined): void {
  if (!socket || socket.destroyed) return;
  try {
    socket.resetAndDestroy();
  } catch {
    socket.destroy();
  }
}

/**
 * A TCP proxy on a free loopback port (or `listenPort`) to `targetHost:targetPort`, whose
 * mode can change at any time: the network faults of the harness.
 *
 * @example
 * const proxy = await createTcpProxy({ targetPort: redis.port });
 * proxy.setMode({ kind: 'blackhole' }); // requests arrive, replies are lost
 * proxy.heal();
 */
export async function createTcpProxy(options: {
  targetPort: number;
  targetHost?: string;
  listenPort?: number;
}): Promise<TcpProxy> {
  const targetHost = options.targetHost ?? '127.0.0.1';
  let mode: ProxyMode = { kind: 'pass' };
  const pairs = new Set<Pair>();

  function delayFor(): number {
    if (mode.kind !== 'delay') return 0;
    return Math.max(0, mode.meanMs + (Math.random() * 2 - 1) * mode.jitterMs);
  }

  function pump(direction: Direction): void {
    direction.timer = undefined;
    const now = performance.now();
    while (direction.queue.length && direction.queue[0]!.at <= now) {
      const { chunk } = direction.queue.shift()!;
      if (!direction.to.destroyed) direction.to.write(chunk);
    }
    const next = direction.queue[0];
    if (next) direction.timer = setTimeout(() => pump(direction), next.at - now);
  }

  function forward(pair: Pair, direction: Direction | undefined, chunk: Buffer, isReply: boolean) {
    if (mode.kind === 'drop' || (mode.kind === 'blackhole' && isReply) || !direction) {
      pair.broken = true;
      return;
    }
    if (mode.kind === 'reset') return;
    const delay = delayFor();
    if (delay === 0 && direction.queue.length === 0) {
      if (!direction.to.destroyed) direction.to.write(chunk);
      return;
    }
    // Never before an earlier chunk: a stream stays in order however the delays fall.
    const at = Math.max(performance.now() + delay, direction.lastAt);
    direction.lastAt = at;
    direction.queue.push({ at, chunk });
    if (!direction.timer)
      direction.timer = setTimeout(() => pump(direction), at - performance.now());
  }

  function close(pair: Pair, abrupt: boolean): void {
    if (!pairs.delete(pair)) return;
    for (const direction of [pair.toUp, pair.toDown]) {
      if (direction?.timer) clearTimeout(direction.timer);
    }
    if (abrupt) {
      reset(pair.down);
      reset(pair.up);
    } else {
      pair.down.destroy();
      pair.up?.destroy();
    }
  }

  function attachUp(pair: Pair): void {
    const up = connect({ host: targetHost, port: options.targetPort });
    pair.up = up;
    pair.toUp = { to: up, queue: [], timer: undefined, lastAt: 0 };
    up.setNoDelay(true);
    up.on('data', (chunk: Buffer) => forward(pair, pair.toDown, chunk, true));
    up.on('error', () => close(pair, true));
    up.on('close', () => close(pair, false));
  }

  const server: Server = createServer((down) => {
    down.setNoDelay(true);
    const pair: Pair = {
      down,
      up: undefined,
      broken: false,
      toUp: undefined,
      toDown: { to: down, queue: [], timer: undefined, lastAt: 0 },
    };
    pairs.add(pair);
    down.on('error', () => close(pair, true));
    down.on('close', () => close(pair, false));
    down.on('data', (chunk: Buffer) => forward(pair, pair.toUp, chunk, false));
    if (mode.kind === 'reset') {
      close(pair, true);
      return;
    }
    // In a partition the connection never reaches the target (nor would a SYN).
    if (mode.kind === 'drop') pair.broken = true;
    else attachUp(pair);
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.listenPort ?? 0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;

  return {
    port,
    get mode() {
      return mode;
    },
    get connections() {
      return pairs.size;
    },
    setMode(next) {
      mode = next;
      if (next.kind === 'reset') for (const pair of [...pairs]) close(pair, true);
    },
    heal() {
      mode = { kind: 'pass' };
      for (const pair of [...pairs]) if (pair.broken) close(pair, true);
    },
    async close() {
      for (const pair of [...pairs]) close(pair, true);
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
