import { type Clock, DlmError } from '@dlm/core';
import { Cluster, type Redis } from 'ioredis';
import { bounded } from './command-bounds.js';
import { wholeOption } from './option-checks.js';

/**
 * `minReplicas`: a write (grant, extend, release, revoke) is reported only once `WAIT` says that
 * many replicas have it, so a replica promoted after the master's crash has it too. `WAIT`
 * waits for every write this connection made before it, so it follows the write on the same
 * connection. When too few replicas confirm within `replicaTimeoutMs`, the write is on the
 * master but may be lost in a failover: the caller hears UNAVAILABLE, `indeterminate`.
 */

export interface ReplicaOptions {
  /**
   * How many replicas must confirm (`WAIT`) a grant, extend, release or revoke before it is
   * reported; otherwise the call fails with UNAVAILABLE (`indeterminate`). Default 0 (none).
   * While fewer replicas than this are up, every write waits `replicaTimeoutMs` and fails.
   */
  minReplicas?: number;
  /** How long `WAIT` waits for the replicas, in ms. Default 500. */
  replicaTimeoutMs?: number;
}

export interface ReplicaWait {
  readonly minReplicas: number;
  /**
   * Resolves once `minReplicas` replicas have this connection's writes so far; `key` is the
   * written lock key (on a Cluster it routes the WAIT to the master of its slot).
   */
  confirm(what: string, key: string): Promise<void>;
}

const DEFAULT_REPLICA_TIMEOUT_MS = 500;

/** Checks `minReplicas`/`replicaTimeoutMs`; `undefined` when no replica must confirm. */
export function replicaWait(
  client: Redis | Cluster,
  clock: Clock,
  commandTimeoutMs: number,
  options: ReplicaOptions,
): ReplicaWait | undefined {
  const minReplicas = wholeOption('minReplicas', options.minReplicas, 0, 0, '');
  const timeoutMs = wholeOption(
    'replicaTimeoutMs',
    options.replicaTimeoutMs,
    DEFAULT_REPLICA_TIMEOUT_MS,
    1,
  );
  if (minReplicas === 0) return undefined;
  return {
    minReplicas,
    async confirm(what, key) {
      // WAIT answers by itself after timeoutMs; the bound covers a server that does not answer.
      const confirmed = await bounded(
        { clock, timeoutMs: timeoutMs + commandTimeoutMs },
        `${what}: WAIT`,
        true,
        () => waitFor(client, key, minReplicas, timeoutMs),
      );
      if (confirmed < minReplicas) {
        throw new DlmError(
          'UNAVAILABLE',
          `${what}: only ${confirmed} of the ${minReplicas} replicas required (minReplicas) confirmed the write within ${timeoutMs} ms; it may be lost in a failover`,
          { indeterminate: true },
        );
      }
    },
  };
}

/**
 * `WAIT` on the connection that ran the write. A Cluster would send a keyless WAIT to any node:
 * in a pipeline led by a command on the written key it goes to the master of that key's slot,
 * on the same connection as the write.
 */
async function waitFor(
  client: Redis | Cluster,
  key: string,
  minReplicas: number,
  timeoutMs: number,
): Promise<number> {
  if (!(client instanceof Cluster)) return client.wait(minReplicas, timeoutMs);
  const replies = await client.pipeline().exists(key).call('WAIT', minReplicas, timeoutMs).exec();
  const [error, confirmed] = replies?.[1] ?? [new Error('WAIT: no reply'), 0];
  if (error) throw error;
  return Number(confirmed);
}
