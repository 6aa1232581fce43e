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
 *
 * With `shared` (a semaphore or a read-write lock), `clients` sessions loop side by side: each
 * acquire asks for the workload's mode, and only a writer (exclusive) touches the resource.
 * Readers would present their tokens out of order (a reader with a lower token reading after
 * one with a higher one is fine for them, not for a fence), so they do not use it; what a
 * shared segment checks is S7 on the holders.
 */
import { writeFileSync } from 'node:fs';
import { type AcquireOptions, createClient, type DlmClient, type Lease } from '@dlm/client';
import { DEFAULT_LIMITS } from '@dlm/core';
import {
  completionOf,
  createHistoryWriter,
  type OpEvent,
  type OpName,
  type Phase,
} from './history.js';
import { runMeddler } from './meddler.js';
import { monoNow, sleep } from './time.js';
import type { WorkerConfig, WorkerStatus } from './worker-config.js';

const config = JSON.parse(process.env.DLM_FAULTS_WORKER ?? '') as WorkerConfig;
const history = createHistoryWriter(config.historyPath, config.proc);
function connect(): DlmClient {
  const client = createClient({
    url: config.url,
    name: `dlm-faults ${config.proc}`,
    requestTimeoutMs: config.requestTimeoutMs,
    pingIntervalMs: 1_000,
    reconnect: { initialDelayMs: 50, maxDelayMs: 1_000 },
  });
  // Background failures (a release retried after a reconnect…) are part of the faults.
  client.on('error', () => {});
  return client;
}
const clients = Array.from({ length: Math.max(1, config.clients ?? 1) }, connect);
const client = clients[0]!;

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

/** What an operation's invoke or completion records besides its kind, name and time. */
type OpFields = Pick<
  OpEvent,
  'token' | 'value' | 'read' | 'mode' | 'limit' | 'lockDelayMs' | 'maxHoldMs'
>;

function invoke(f: OpName, name: string, extra: OpFields) {
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
        mode?: 'exclusive' | 'shared';
        limit?: number;
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

/** A shared acquire: its limit, absent for a read lock (the server's maximum). */
type ModeAsked = { mode: 'shared'; limit?: number } | undefined;

async function acquire(name: string, via = client, asked?: ModeAsked): Promise<Lease | null> {
  const delay = asked
    ? {}
    : {
        ...(config.lockDelayMs ? { lockDelayMs: config.lockDelayMs } : {}),
        ...(config.maxHoldMs ? { maxHoldMs: config.maxHoldMs } : {}),
      };
  const op = invoke('acquire', name, asked ? { mode: 'shared', ...limitOf(asked) } : delay);
  try {
    // `mode` and `limit` go through as the client passes them on. A client without shared
    // modes leaves them out and its lease says no mode: the grant was exclusive, and is recorded
    // so (the shared segment then fails for want of shared grants, rather than pass vacuously).
    const options = {
      ttlMs: config.ttlMs,
      waitMs: config.waitMs,
      owner: `${config.proc}-${opSeq}-${Math.random().toString(36).slice(2, 8)}`,
      ...asked,
      ...delay,
    } as AcquireOptions;
    const lease = await via.acquire(name, options);
    const token = lease.token.toString();
    const granted = lease as Lease & { mode?: 'exclusive' | 'shared'; limit?: number };
    const mode = granted.mode ?? 'exclusive';
    op.ok({
      token,
      ttlMs: lease.ttlMs,
      deadline: monoNow() + lease.remainingMs(),
      ...(mode === 'shared'
        ? { mode, limit: granted.limit ?? limitOf(asked ?? { mode }).limit }
        : asked
          ? { mode }
          : {}),
    });
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

function limitOf(asked: NonNullable<ModeAsked>): { limit: number } {
  return { limit: asked.limit ?? DEFAULT_LIMITS.maxHolders };
}

async function iteration(): Promise<void> {
  const name = config.names[Math.floor(Math.random() * config.names.length)]!;
  const lease = await acquire(name);
  if (!lease) {
    await sleep(between([50, 200]));
    return;
  }
  await readModifyWrite(name, lease);
}

/** The fenced read → (extend) → write → release, on a lease just granted. */
/** Extends the lease with `config.extendProbability`, recording it; whether it tried. */
async function maybeExtend(name: string, lease: Lease, token: string): Promise<boolean> {
  if (Math.random() >= config.extendProbability) return false;
  const extend = invoke('extend', name, { token });
  try {
    await lease.extend();
    extend.ok({ ttlMs: lease.ttlMs, deadline: monoNow() + lease.remainingMs() });
  } catch (error) {
    extend.failed(error);
  }
  return true;
}

async function readModifyWrite(name: string, lease: Lease): Promise<void> {
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
    await maybeExtend(name, lease, token);
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

/** One loop of a shared-mode workload on `via`: acquire in the workload's mode, then hold. */
async function sharedIteration(via: DlmClient, shared: NonNullable<WorkerConfig['shared']>) {
  const name = config.names[Math.floor(Math.random() * config.names.length)]!;
  const writer = shared.kind === 'read-write' && Math.random() < shared.writeProbability;
  const asked: ModeAsked = writer
    ? undefined
    : shared.kind === 'semaphore'
      ? { mode: 'shared', limit: shared.limit }
      : { mode: 'shared' };
  const lease = await acquire(name, via, asked);
  if (!lease) {
    await sleep(between([50, 200]));
    return;
  }
  if (writer) {
    await readModifyWrite(name, lease);
    return;
  }
  const token = lease.token.toString();
  // `read`: the phase the client nemeses pick a holder in.
  setStatus({ name, token, phase: 'read' });
  await sleep(between(config.holdMs));
  if (await maybeExtend(name, lease, token)) await sleep(between(config.holdMs));
  const release = invoke('release', name, { token });
  try {
    release.ok({ released: await lease.release() });
  } catch (error) {
    release.failed(error);
  }
  setStatus(null);
  await sleep(between(config.thinkMs));
}

setStatus(null);
const { shared } = config;
if (config.role === 'meddler') await runMeddler(config, history, () => stopping);
else if (shared) {
  await Promise.all(
    clients.map(async (via) => {
      while (!stopping) await sharedIteration(via, shared);
    }),
  );
} else while (!stopping) await iteration();
await Promise.race([Promise.all(clients.map((c) => c.close())), sleep(2_000)]);
history.close();
process.exit(0);
