#!/usr/bin/env node
/**
 * The dlm server as the fault harness runs it: `@dlm/server`'s `startServer`, with the same
 * flags as `dlm-server` (`--port`, `--backend`, `--data-dir`, `--redis-url`, …), on a clock the
 * harness can jump and skew. The server opens the backend as `dlm-server` does, and gives the
 * clock to core's lock service and to the adapters that take one (embedded, redis, redlock), so
 * for the embedded backend a skew reaches lease expiry.
 *
 * Environment:
 * - `DLM_FAULTS_CONTROL_PORT`: a loopback HTTP port for the clock: `POST /clock` with
 *   `{"jumpMs": 4000}` or `{"rate": 2}`; `GET /clock`.
 * - `DLM_FAULTS_INFO`: a file to write `{ kind, capabilities }` to once serving.
 * - `DLM_FAULTS_PLANT`: `early-token:<pause ms>` serves a planted PostgreSQL backend (the
 *   linearizability segments' negative control, planted-early-token.ts) instead of the real one.
 */
import { writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AcquireRequest, BackendQueue, LockBackend, QueueWaiter } from '@dlm/core';
import {
  baseServerOptions,
  createBackend,
  createLogger,
  parseConfig,
  type ServerConfig,
  startServer,
} from '@dlm/server';
import { plantEarlyToken } from './planted-early-token.js';
import { createSkewClock, type SkewClock } from './skew-clock.js';

function serveClockControl(clock: SkewClock, port: number): void {
  const server = createServer((request, response) => {
    let body = '';
    request.on('data', (chunk: Buffer) => {
      body += chunk.toString('utf8');
    });
    request.on('end', () => {
      try {
        if (request.method === 'POST') {
          const command = JSON.parse(body || '{}') as { jumpMs?: number; rate?: number };
          if (command.jumpMs !== undefined) clock.jump(command.jumpMs);
          if (command.rate !== undefined) clock.setRate(command.rate);
        }
        response.writeHead(200, { 'content-type': 'application/json' });
        response.end(JSON.stringify({ rate: clock.rate, offsetMs: clock.offsetMs }));
      } catch (error) {
        response.writeHead(400, { 'content-type': 'text/plain' });
        response.end(error instanceof Error ? error.message : String(error));
      }
    });
  });
  server.listen(port, '127.0.0.1');
}

/** The planted backend `DLM_FAULTS_PLANT` asks for, or undefined: the server opens the real one. */
async function planted(config: ServerConfig, clock: SkewClock): Promise<LockBackend | undefined> {
  const plant = process.env.DLM_FAULTS_PLANT;
  if (!plant) return undefined;
  const [what, pause] = plant.split(':');
  if (what === 'no-lock-delay') {
    return withoutLockDelays(await createBackend(config.backend, createLogger('warn'), { clock }));
  }
  if (what === 'no-hold-cap') {
    return withoutHoldCaps(await createBackend(config.backend, createLogger('warn'), { clock }));
  }
  if (what !== 'early-token' || config.backend.kind !== 'postgres') {
    throw new Error(
      `DLM_FAULTS_PLANT=${plant}: early-token on postgres, or no-lock-delay, or no-hold-cap`,
    );
  }
  const real = await createBackend(config.backend, createLogger('warn'), { clock });
  return plantEarlyToken(real, config.backend.url, Number(pause ?? 0));
}

/**
 * The lock-delay segment's negative control: `real`, declaring lock-delays (so the service takes
 * `lockDelayMs`) but granting as if none had been asked for. Never used outside the harness.
 */
function withoutLockDelays(real: LockBackend): LockBackend {
  return ignoring(real, 'lockDelay', ({ lockDelayMs: _ignored, ...request }) => request, {
    lockDelayOf: { value: async () => 0 },
  });
}

/**
 * The hold-cap segment's negative control: `real`, declaring caps on holding (so the service
 * takes `maxHoldMs`) but granting as if none had been asked for: extends run past the cap.
 */
function withoutHoldCaps(real: LockBackend): LockBackend {
  return ignoring(real, 'maxHold', ({ maxHoldMs: _ignored, ...request }) => request);
}

/**
 * `real`, declaring `capability` but granting every acquire as `strip` leaves it: through
 * `tryAcquire`, and through the drivers of a backend with a queue of its own (etcd, ZooKeeper,
 * Redis, PostgreSQL), which grant its waiters.
 */
function ignoring(
  real: LockBackend,
  capability: 'lockDelay' | 'maxHold',
  strip: (request: AcquireRequest) => AcquireRequest,
  extra: PropertyDescriptorMap = {},
): LockBackend {
  const queue =
    real.queue &&
    (Object.create(real.queue, {
      driver: {
        value: (request: AcquireRequest, waiter: QueueWaiter) =>
          real.queue!.driver(strip(request), waiter),
      },
    }) as BackendQueue);
  // Everything else is the real backend's (its capabilities read live: Redis's are a getter).
  return Object.create(real, {
    capabilities: { get: () => ({ ...real.capabilities, [capability]: true }) },
    tryAcquire: { value: (request: AcquireRequest) => real.tryAcquire(strip(request)) },
    ...extra,
    ...(queue ? { queue: { value: queue } } : {}),
  }) as LockBackend;
}

const config = parseConfig(process.argv.slice(2));
if (config === null) process.exit(0);
const clock = createSkewClock();
const logger = createLogger(config.logLevel);
const plantedBackend = await planted(config, clock);
const server = await startServer({
  ...baseServerOptions(config, logger),
  ...(plantedBackend ? { backend: plantedBackend } : {}),
  service: { clock },
});
const { backend } = server;
const controlPort = Number(process.env.DLM_FAULTS_CONTROL_PORT ?? 0);
if (controlPort > 0) serveClockControl(clock, controlPort);
if (process.env.DLM_FAULTS_INFO) {
  writeFileSync(
    process.env.DLM_FAULTS_INFO,
    JSON.stringify({ kind: backend.kind, capabilities: backend.capabilities }),
  );
}

let stopping = false;
process.on('SIGTERM', () => {
  if (stopping) return;
  stopping = true;
  // The server closes the backend it opened (not one it was given).
  server
    .close()
    .then(() => plantedBackend?.close())
    .finally(() => process.exit(0));
});
