import type { DlmError, Timer } from '@dlm/core';
import type { CallOptions } from './connection.js';
import { unavailable } from './failures.js';
import { frame } from './wire.js';

/**
 * One request from the call until its caller stops waiting: queued while there is no session,
 * then in flight until its reply. It stays in flight after a timeout or an abort, so a reply
 * that still comes reaches `onLateResult`.
 */
export class PendingRequest {
  readonly frame: string;
  sent = false;
  /** The caller still waits for this reply (false after a timeout or an abort). */
  waiting = true;
  // At most one of the two bounds its wait: the shared deadline queue's entry or a timer.
  cancelDeadline: (() => void) | undefined;
  timer: Timer | undefined;
  private abortListener: (() => void) | undefined;

  constructor(
    readonly id: number,
    method: string,
    params: unknown,
    readonly options: CallOptions<unknown>,
    private readonly onResult: (result: unknown) => void,
    private readonly onError: (error: DlmError) => void,
  ) {
    this.frame = frame(id, method, params);
  }

  /** Calls `stop` once when the caller's signal aborts (until the request settles). */
  listenForAbort(signal: AbortSignal, stop: () => void): void {
    this.abortListener = stop;
    signal.addEventListener('abort', stop, { once: true });
  }

  /** The success reply: to the caller while it waits, else to `onLateResult`. */
  succeed(result: unknown): void {
    if (!this.waiting) {
      this.options.onLateResult?.(result);
      return;
    }
    this.waiting = false;
    this.finish();
    this.onResult(result);
  }

  /** Rejects the caller, if it still waits. */
  fail(error: DlmError): void {
    if (!this.waiting) return;
    this.waiting = false;
    this.finish();
    this.onError(error);
  }

  private finish(): void {
    this.cancelDeadline?.();
    this.timer?.cancel();
    if (this.abortListener) this.options.signal?.removeEventListener('abort', this.abortListener);
  }
}

/** Request/response correlation: ids, the queue of requests waiting for a session, and the in-flight map. */
export class RequestTable {
  private lastId = 0;
  /** Waiting for a session, in call order. */
  private queue: PendingRequest[] = [];
  private readonly inflight = new Map<number, PendingRequest>();

  nextId(): number {
    return ++this.lastId;
  }

  enqueue(request: PendingRequest): void {
    this.queue.push(request);
  }

  /** Takes out everything that waited for a session (to send it, or to fail it). */
  drainQueue(): PendingRequest[] {
    return this.queue.splice(0);
  }

  /** The caller stopped waiting: a request not sent yet never will be. */
  withdraw(request: PendingRequest): void {
    const queued = this.queue.indexOf(request);
    if (queued >= 0) this.queue.splice(queued, 1);
  }

  sent(request: PendingRequest): void {
    request.sent = true;
    this.inflight.set(request.id, request);
  }

  /** The request in flight with this id, left in flight (a notification about it). */
  peek(id: unknown): PendingRequest | undefined {
    return typeof id === 'number' ? this.inflight.get(id) : undefined;
  }

  /** The request a reply answers, no longer in flight. */
  take(id: number): PendingRequest | undefined {
    const request = this.inflight.get(id);
    if (request) this.inflight.delete(id);
    return request;
  }

  failQueued(error: DlmError): void {
    for (const request of this.drainQueue()) request.fail(error);
  }

  /** The connection went down: every request sent on it may or may not have been applied. */
  failInflight(reason: string): void {
    for (const request of this.inflight.values()) {
      request.options.onDropped?.();
      request.fail(
        unavailable(
          `connection lost before the reply (${reason})`,
          undefined,
          request.options.write === true,
        ),
      );
    }
    this.inflight.clear();
  }
}
