#!/usr/bin/env node
/**
 * The dlm server as the fault harness runs it: `@dlm/server`'s `startServer`, with the same
 * flags as `dlm-server` (`--port`, `--backend`, `--data-dir`, `--redis-url`, …), on a clock the
 * harness can jump and skew. The clock goes to core's lock service and to the adapters that
 * take one (embedded, redis, redlock), so for the embedded backend a skew reaches lease expiry.
 *
 * Environment:
 * - `DLM_FAULTS_CONTROL_PORT`: a loopback HTTP port for the clock: `POST /clock` with
 *   `{"jumpMs": 4000}` or `{"rate": 2}`; `GET /clock`.
 * - `DLM_FAULTS_INFO`: a file to write `{ kind, capabilities }` to once serving.
 * - `DLM_FAULTS_REDIS_DURABLE=1`: the Redis runs with AOF (`appendfsync always`).
 */
import { writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { LockBackend } from '@dlm/core';
import { type BackendConfig, createLogger, parseConfig, startServer } from '@dlm/server';
import { createSkewClock, type SkewClock } from './skew-clock.js';

async function openBackend(config: BackendConfig, clock: SkewClock): Promise<LockBackend> {
  switch (config.kind) {
    case 'embedded': {
      const { embeddedBackend } = await import('@dlm/adapter-embedded');
      return embeddedBackend({
        clock,
        ...(config.dataDir === null ? {} : { dataDir: config.dataDir }),
      });
    }
    case 'redis': {
      const { redisBackend } = await import('@dlm/adapter-redis');
      const backend = redisBackend({
        url: config.url,
        clock,
        durable: process.env.DLM_FAULTS_REDIS_DURABLE === '1',
      });
      // Down at start is not fatal: requests answer UNAVAILABLE until Redis is back.
      await backend.ready().catch(() => {});
      return backend;
    }
    case 'redlock': {
      const { redlockBackend } = await import('@dlm/adapter-redlock');
      const backend = redlockBackend({ urls: config.urls, clock });
      await backend.ready().catch(() => {});
      return backend;
    }
    case 'etcd': {
      const { etcdBackend } = await import('@dlm/adapter-etcd');
      return etcdBackend({ endpoints: config.endpoints });
    }
    case 'zookeeper': {
      const { zookeeperBackend } = await import('@dlm/adapter-zookeeper');
      return zookeeperBackend({ connect: config.connect });
    }
  }
}

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

const config = parseConfig(process.argv.slice(2));
if (config === null) process.exit(0);
const clock = createSkewClock();
const logger = createLogger(config.logLevel);
const backend = await openBackend(config.backend, clock);
const server = await startServer({
  host: config.host,
  port: config.port,
  backend,
  logger,
  service: { clock },
});
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
  server
    .close()
    .then(() => backend.close())
    .finally(() => process.exit(0));
});
