#!/usr/bin/env node
/**
 * The fenced resource as a process of its own: a loopback HTTP server over `createFencedCounter`.
 *
 * - `POST /read`  `{"key","token"}`          → 200 `{"value"}` | 409 `{"stale":true}`
 * - `POST /write` `{"key","token","value"}`  → 200 `{}`        | 409 `{"stale":true}`
 * - `GET /state`                             → `{"fencing", "keys": {key: {value, highest}}}`
 *
 * Every read and write is appended to its own history file (`DLM_FAULTS_HISTORY`) before the
 * answer goes out, in the order the resource handled them. Flags: `--port N`, `--no-fencing`.
 */
import { createServer } from 'node:http';
import { parseToken } from '@dlm/core';
import { parseFlags } from '@dlm/flags';
import { createHistoryWriter } from './history.js';
import { createFencedCounter } from './resource.js';

const { values } = parseFlags(process.argv.slice(2), {
  port: { type: 'string' },
  'no-fencing': { type: 'boolean' },
});
const counter = createFencedCounter({ fencing: values['no-fencing'] !== true });
const historyPath = process.env.DLM_FAULTS_HISTORY;
if (!historyPath) throw new Error('DLM_FAULTS_HISTORY is required');
const history = createHistoryWriter(historyPath, 'resource');

interface Request {
  key: string;
  token: string;
  value?: number;
}

function handle(path: string, body: Request): { status: number; reply: unknown } {
  const token = parseToken(body.token);
  if (path === '/read') {
    const { accepted, value } = counter.read(body.key, token);
    history.record({
      kind: 'resource',
      f: 'read',
      name: body.key,
      token: body.token,
      accepted,
      value,
    });
    return accepted ? { status: 200, reply: { value } } : { status: 409, reply: { stale: true } };
  }
  if (path === '/write') {
    const value = Number(body.value);
    const { accepted, previous } = counter.write(body.key, token, value);
    history.record({
      kind: 'resource',
      f: 'write',
      name: body.key,
      token: body.token,
      accepted,
      value,
      previous,
    });
    return accepted ? { status: 200, reply: {} } : { status: 409, reply: { stale: true } };
  }
  return { status: 404, reply: { error: 'not found' } };
}

const server = createServer((request, response) => {
  let text = '';
  request.on('data', (chunk: Buffer) => {
    text += chunk.toString('utf8');
  });
  request.on('end', () => {
    let status = 200;
    let reply: unknown;
    try {
      if (request.method === 'GET' && request.url === '/state') {
        reply = { fencing: counter.fencing, keys: counter.snapshot() };
      } else {
        ({ status, reply } = handle(request.url ?? '/', JSON.parse(text) as Request));
      }
    } catch (error) {
      status = 400;
      reply = { error: error instanceof Error ? error.message : String(error) };
    }
    response.writeHead(status, { 'content-type': 'application/json' });
    response.end(JSON.stringify(reply));
  });
});
server.keepAliveTimeout = 30_000;
server.listen(Number(values.port ?? 0), '127.0.0.1');
process.on('SIGTERM', () => {
  server.close();
  history.close();
  process.exit(0);
});
