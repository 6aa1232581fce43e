#!/usr/bin/env node
/**
 * One workload process of the fault harness. It loops: acquire a lock (waiting) → read the
 * guarded counter from the fenced resource, presenting the token → wait a little (sometimes
 * extending the lease) → write counter + 1 with the token → release. Every step is recorded in
 * its history (invoke, then ok / fail / info), and so is every lease the client reports lost.
 *
 * It deliberately does not check its lease before writing: the claim under test is that the
 * fencing token alone keeps a stale holder's write out (a holder can be paused between any
 * check and the write anyway).
 */
import { writeFileSync } from 'node:fs';
import { createClient, type Lease } from '@dlm/client';
import { completionOf, createHistoryWriter, type OpName, type Phase } from './history.js';
import { runMeddler } from './meddler.js';
import { monoNow, sleep } from './time.js';
import type { WorkerConfig, WorkerStatus } from './worker-config.js';

const config = JSON.parse(process.env.DLM_FAULTS_WORKER ?? '') as WorkerConfig;
const history = createHistoryWriter(config.historyPath, config.proc);
const client = createClient({
  url: config.url,
  name: `dlm-faults ${config.proc}`,
  requestTimeoutMs: config.requestTimeoutMs,
  pingIntervalMs: 1_000,
  reconnect: { initialDelayMs: 50, maxDelayMs: 1_000 },
});
// Background failures (a release retried after a reconnect…) are part of the faults.
client.on('error', () => {});

let opSeq = 0;
let stopping = false;
process.on('SIGTERM', () => {
  stopping = true;
});

const between = ([min, max]: [number, number]) => min + Math.random() * (max - min);

function setStatus(holding: WorkerStatus['holding']): void {
  const status: WorkerStatus = { proc: config.proc, pid: process.pid, holding };
  try {
    writeFileSync(config.statusPath, JSON.stringify(status));
  } catch {}
}

function invoke(f: OpName, name: string, extra: { token?: string; value?: number; read?: number }) {
  const op = ++opSeq;
  history.record({ kind: 'op', op, f, type: 'invoke', name, ...extra });
  return {
    ok(
      fields: {
        token?: string;
        ttlMs?: number;
        deadline?: number;
        value?: number;
        released?: boolean;
      } = {},
    ) {
      history.record({ kind: 'op', op, f, type: 'ok', name, ...extra, ...fields });
    },
    failed(error: unknown, type?: Phase) {
      const result = completionOf(error);
      history.record({
        kind: 'op',
        op,
        f,
        type: type ?? result.type,
        name,
        ...extra,
        error: result.error,
      });
    },
  };
}

async function resource(path: string, body: object): Promise<{ status: number; value?: number }> {
  const response = await fetch(`${config.resourceUrl}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  const reply = (await response.json()) as { value?: number };
  return { status: response.status, ...(reply.value === undefined ? {} : { value: reply.value }) };
}

async function acquire(name: string): Promise<Lease | null> {
  const op = invoke('acquire', name, {});
  try {
    const lease = await client.acquire(name, {
      ttlMs: config.ttlMs,
      waitMs: config.waitMs,
      owner: `${config.proc}-${opSeq}-${Math.random().toString(36).slice(2, 8)}`,
    });
    const token = lease.token.toString();
    op.ok({ token, ttlMs: lease.ttlMs, deadline: monoNow() + lease.remainingMs() });
    lease.signal.addEventListener('abort', () => {
      if (lease.lost) {
        history.record({ kind: 'lost', name, token, reason: lease.lost });
      }
    });
    return lease;
  } catch (error) {
    op.failed(error);
    return null;
  }
}

async function iteration(): Promise<void> {
  const name = config.names[Math.floor(Math.random() * config.names.length)]!;
  const lease = await acquire(name);
  if (!lease) {
    await sleep(between([50, 200]));
    return;
  }
  const token = lease.token.toString();
  setStatus({ name, token, phase: 'acquired' });

  let readValue: number | undefined;
  const read = invoke('read', name, { token });
  try {
    const reply = await resource('/read', { key: name, token });
    if (reply.status === 200 && reply.value !== undefined) {
      readValue = reply.value;
      read.ok({ value: reply.value });
    } else read.failed(new Error(`stale token (HTTP ${reply.status})`), 'fail');
  } catch (error) {
    read.failed(error, 'info');
  }

  if (readValue !== undefined) {
    setStatus({ name, token, phase: 'read' });
    await sleep(between(config.holdMs));
    if (Math.random() < config.extendProbability) {
      const extend = invoke('extend', name, { token });
      try {
        await lease.extend();
        extend.ok({ ttlMs: lease.ttlMs, deadline: monoNow() + lease.remainingMs() });
      } catch (error) {
        extend.failed(error);
      }
    }
    const value = readValue + 1;
    const write = invoke('write', name, { token, value, read: readValue });
    try {
      const reply = await resource('/write', { key: name, token, value });
      if (reply.status === 200) write.ok();
      else write.failed(new Error(`stale token (HTTP ${reply.status})`), 'fail');
    } catch (error) {
      write.failed(error, 'info');
    }
    setStatus({ name, token, phase: 'written' });
  }

  const release = invoke('release', name, { token });
  try {
    const released = await lease.release();
    release.ok({ released });
  } catch (error) {
    release.failed(error);
  }
  setStatus(null);
  await sleep(between(config.thinkMs));
}

setStatus(null);
if (config.role === 'meddler') await runMeddler(config, history, () => stopping);
else while (!stopping) await iteration();
await Promise.race([client.close(), sleep(2_000)]);
history.close();
process.exit(0);
