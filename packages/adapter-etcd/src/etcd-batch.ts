import { type Clock, DlmError, systemClock, type Timer } from '@dlm/core';
import { type Etcd3, EtcdLeaseInvalidError, type ITxnRequest, type ITxnResponse } from 'etcd3';
import { type Budget, type RetryMode, withRetries } from './etcd-calls.js';

/**
 * Sends the hot path's transactions (acquire, release) to etcd, several at once in one
 * transaction when they come faster than etcd answers.
 *
 * Why: every call is a gRPC request (an HTTP/2 stream, headers, a deadline timer) and every
 * transaction a Raft proposal; under load, most of a dlm server's CPU goes to those. While
 * `MAX_IN_FLIGHT` transactions are outstanding, further ones queue; the next call carries every
 * queued one as a nested transaction of one outer transaction with no comparisons. Each nested
 * transaction keeps its own comparisons and branches, and etcd applies them in order in one
 * revision, so each one's outcome is what it would have been alone at that point. What changes:
 *
 * - Their writes share one revision, so grants in one batch get the same token: tokens are per
 *   name, and two transactions on the same lock never share a batch (etcd would refuse a
 *   transaction that writes one key twice anyway), so per name tokens still strictly grow.
 * - The marker that tells a release's delete from an expiry is written once per batch, outside
 *   the nested transactions (only releases are batched; expiries and revocations are never part
 *   of a batched revision, so every lock-key or shared-holder delete in it is a release).
 * - When the batch fails, each member's fate is what it would be alone: a failure that proves
 *   nothing was applied (refused before Raft, a lease that is gone, ...) sends each member again
 *   on its own; one that leaves the outcome unknown fails the members that must not run twice
 *   (`once`: a release) as indeterminate and sends the others again on their own.
 * A call with nothing outstanding goes at once, alone, as a plain transaction.
 */
export interface TxnSender {
  send(
    limit: Budget,
    mode: RetryMode,
    /** Transactions with the same `key` never share a batch. */
    key: string,
    request: ITxnRequest,
    /**
     * A release: the marker key is put (`released`) in the same revision, so that the watch
     * tells its delete from an expiry (etcd-watch.ts). Revocations are not sent through here.
     */
    release?: boolean,
  ): Promise<ITxnResponse>;
}

/** Transactions outstanding before the next ones wait to be batched. */
const MAX_IN_FLIGHT = 2;
/** etcd refuses more than 128 operations in one branch (`--max-txn-ops`); stay well below. */
const MAX_BATCH = 64;
/** A queued transaction waits no longer than this for an outstanding one (a stalled member). */
const MAX_WAIT_MS = 50;

interface Entry {
  limit: Budget;
  mode: RetryMode;
  key: string;
  request: ITxnRequest;
  release: boolean;
  resolve(response: ITxnResponse): void;
  reject(error: unknown): void;
}

/** Failures after which nothing of the transaction was applied (refused as a whole). */
function refusedWhole(error: unknown): boolean {
  const cause = error instanceof DlmError ? error.cause : error;
  if (cause instanceof EtcdLeaseInvalidError) return true;
  const message = cause instanceof Error ? cause.message : String(cause);
  return /requested lease not found|duplicate key given in txn request|too many operations in txn request|request is too large/.test(
    message,
  );
}

/** `clock`: where the batching timer is set (the budgets bring their own for the calls). */
export function txnSender(client: Etcd3, markerKey: string, clock: Clock = systemClock): TxnSender {
  const marker = Buffer.from(markerKey);
  const markerPut = { request_put: { key: marker, value: Buffer.from('released') } };
  let inFlight = 0;
  let queue: Entry[] = [];
  let timer: Timer | undefined;

  function alone(entry: Entry): Promise<ITxnResponse> {
    // A release's failure branch may delete too (a shared holder's key, etcd-backend.ts): it
    // gets the marker as well (a marker without a delete in its revision tells nothing).
    const failure = entry.request.failure ?? [];
    const request = entry.release
      ? Object.assign({}, entry.request, {
          success: [...(entry.request.success ?? []), markerPut],
          failure: failure.length ? [...failure, markerPut] : failure,
        })
      : entry.request;
    return withRetries(entry.limit, entry.mode, true, (deadline) =>
      client.kv.txn(request, { deadline }),
    );
  }

  async function batch(entries: Entry[]): Promise<void> {
    const releases = entries.some((entry) => entry.release);
    const request: ITxnRequest = {
      compare: [],
      success: [
        ...entries.map((entry) => ({ request_txn: entry.request })),
        ...(releases ? [markerPut] : []),
      ],
      failure: [],
    };
    // Bounded by the member with the least time left, so that none hears back later than its
    // own bound (they joined the queue within one round trip of each other).
    const limit: Budget = {
      what: entries[0]!.limit.what,
      clock: entries[0]!.limit.clock,
      remainingMs: () => Math.min(...entries.map((entry) => entry.limit.remainingMs())),
    };
    const mode: RetryMode = entries.some((entry) => entry.mode === 'once') ? 'once' : 'idempotent';
    let response: ITxnResponse;
    try {
      response = await withRetries(limit, mode, true, (deadline) =>
        client.kv.txn(request, { deadline }),
      );
    } catch (error) {
      const unknownOutcome =
        !refusedWhole(error) && error instanceof DlmError && error.details.indeterminate === true;
      for (const entry of entries) {
        if (unknownOutcome && entry.mode === 'once') {
          entry.reject(
            new DlmError('UNAVAILABLE', `${entry.limit.what}: ${(error as Error).message}`, {
              cause: error,
              indeterminate: true,
            }),
          );
        } else {
          alone(entry).then(entry.resolve, entry.reject);
        }
      }
      return;
    }
    entries.forEach((entry, index) => {
      const nested = response.responses[index]?.response_txn;
      if (!nested) {
        entry.reject(new DlmError('INTERNAL', 'etcd: a batched transaction has no response'));
        return;
      }
      entry.resolve(Object.assign({}, nested, { header: response.header }));
    });
  }

  function run(entries: Entry[]): void {
    inFlight += 1;
    const done = () => {
      inFlight -= 1;
      flush(false);
    };
    if (entries.length === 1) {
      const entry = entries[0]!;
      alone(entry).then(entry.resolve, entry.reject).finally(done);
    } else {
      batch(entries).finally(done);
    }
  }

  function flush(force: boolean): void {
    timer?.cancel();
    timer = undefined;
    while (queue.length && (force || inFlight < MAX_IN_FLIGHT)) {
      const taken: Entry[] = [];
      const keys = new Set<string>();
      const rest: Entry[] = [];
      for (const entry of queue) {
        if (entry.limit.remainingMs() <= 0) {
          // Never sent: nothing was applied.
          entry.reject(
            new DlmError('UNAVAILABLE', `${entry.limit.what}: etcd did not answer in time`),
          );
        } else if (taken.length < MAX_BATCH && !keys.has(entry.key)) {
          taken.push(entry);
          keys.add(entry.key);
        } else {
          rest.push(entry);
        }
      }
      queue = rest;
      if (taken.length) run(taken);
      force = false;
    }
    if (queue.length) timer = clock.setTimer(() => flush(true), MAX_WAIT_MS);
  }

  return {
    send(limit, mode, key, request, release = false) {
      return new Promise<ITxnResponse>((resolve, reject) => {
        const entry: Entry = { limit, mode, key, request, release, resolve, reject };
        if (inFlight < MAX_IN_FLIGHT && !queue.length) run([entry]);
        else {
          queue.push(entry);
          if (!timer) timer = clock.setTimer(() => flush(true), MAX_WAIT_MS);
        }
      });
    },
  };
}
