import { embeddedBackend } from '@dlm/adapter-embedded';
import { createClient, type DlmClient, type Lease } from '@dlm/client';
import type { LockBackend } from '@dlm/core';
import { type RunningServer, startServer } from '@dlm/server';

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A dlm server (embedded backend, in memory) and two clients: real leases, real tokens. */
export async function startLockServer() {
  const backend: LockBackend = await embeddedBackend();
  const server: RunningServer = await startServer({ port: 0, backend });
  const holders: DlmClient[] = [
    createClient({ url: server.url }),
    createClient({ url: server.url }),
  ];
  return {
    a: holders[0] as DlmClient,
    b: holders[1] as DlmClient,
    async close() {
      await Promise.all(holders.map((c) => c.close()));
      await server.close();
      await backend.close();
    },
  };
}

/**
 * The situation fencing exists for. Holder A gets the lock, then stalls (a GC pause, a stopped
 * VM) past its lease; the server expires it and B gets the lock with a higher token. A wakes up
 * still believing it may write. Returns both leases; A's has expired on the server by then.
 */
export async function staleHolderAndNewHolder(
  a: DlmClient,
  b: DlmClient,
  name: string,
): Promise<{ stale: Lease; current: Lease }> {
  const stale = await a.acquire(name, { ttlMs: 300 });
  // B queues for the lock (a server-side wait) and gets it when A's lease runs out.
  const current = await b.acquire(name, { ttlMs: 10_000, waitMs: 5_000 });
  if (current.token <= stale.token) throw new Error('tokens must increase');
  return { stale, current };
}

export function lockName(label: string): string {
  return `fencing-recipes/${label}/${Math.random().toString(36).slice(2, 10)}`;
}
