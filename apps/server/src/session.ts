import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { DlmError, isDlmError } from '@dlm/core';
import {
  type NotificationName,
  type NotificationParams,
  type RpcRequestId,
  toRpcError,
} from '@dlm/protocol';
import { CLOSE } from './close-codes.js';
import { helloHandlers } from './hello-handlers.js';
import { lockHandlers } from './lock-handlers.js';
import { Outbox } from './outbox.js';
import { ANONYMOUS, type Principal } from './permissions.js';
import { recordRequest } from './request-metrics.js';
import {
  parseMessage,
  parseMessages,
  parseRequest,
  type RpcRejection,
  type RpcRequest,
} from './rpc.js';
import { SessionLeases } from './session-leases.js';
import type { Handler, SessionContext, SessionScope } from './session-scope.js';
import { createTokenBucket } from './token-bucket.js';
import { watchHandlers } from './watch-handlers.js';

/** The methods that may wait server-side (`waitMs`), and so end when the connection closes. */
const WAITS: ReadonlySet<string> = new Set(['lock.acquire', 'lock.acquireAll']);

export type { SessionContext, SessionLimits } from './session-scope.js';

/**
 * A success reply's text, as `JSON.stringify({ jsonrpc: '2.0', id, result })` writes it, without
 * the wrapper object: built once per reply from the id and the result's own text.
 */
export function replyText(id: RpcRequestId, result: unknown): string {
  if (result === undefined) return JSON.stringify({ jsonrpc: '2.0', id, result });
  const idText = typeof id === 'number' ? String(id) : JSON.stringify(id);
  return `{"jsonrpc":"2.0","id":${idText},"result":${JSON.stringify(result)}}`;
}

/** One WebSocket connection speaking protocol v1. */
export interface Session {
  readonly id: string;
  handleFrame(data: string | null): void;
  /** Sends at once what waits for the end of this turn (multi-message frames). */
  flush(): void;
  /** The connection closed: pending waits end (and can no longer be granted), watches stop. */
  close(): void;
}

/**
 * A session: admits frames (rate, hello, requests in flight), hands each request to its
 * method's handler (`hello-handlers`, `lock-handlers`, `watch-handlers`) and sends the answer.
 */
export function createSession(context: SessionContext): Session {
  return new ProtocolSession(context);
}

type Bucket = ReturnType<typeof createTokenBucket>;

class ProtocolSession implements Session, SessionScope {
  readonly id = randomUUID();
  principal: Principal = ANONYMOUS;
  helloDone = false;
  open = true;
  acquiring = 0;
  readonly watches = new Map<string, () => void>();
  readonly leases: SessionLeases;
  private readonly handlers: Record<RpcRequest['method'], Handler>;
  /** The waiting acquires' controllers; made by the first (an empty Set is 150 bytes a session). */
  private waits: Set<AbortController> | undefined;
  private inflight = 0;
  private readonly bucket: Bucket | undefined;
  private readonly overflow: Bucket | undefined;
  /** Set once `session.hello` agreed on multi-message frames. */
  private outbox: Outbox | undefined;

  constructor(readonly context: SessionContext) {
    this.leases = new SessionLeases(this.id, context.service, context.holders);
    // Object.assign, not spread: past a few sessions V8 gives each spread result a hidden class
    // of its own (about 450 bytes per session), while assigned ones share one.
    this.handlers = Object.assign(helloHandlers(this), lockHandlers(this), watchHandlers(this));
    const { messagesPerSecond, messageBurst } = context.limits;
    if (messagesPerSecond > 0) {
      this.bucket = createTokenBucket(messagesPerSecond, messageBurst, context.now);
      // Frames refused for the rate draw on a second bucket of the same size that refills at a
      // tenth of the rate: a client that backs off when told LIMIT_EXCEEDED never empties it,
      // one that keeps sending regardless does, and is disconnected.
      this.overflow = createTokenBucket(messagesPerSecond / 10, messageBurst, context.now);
    }
  }

  notify<N extends NotificationName>(method: N, params: NotificationParams<N>): void {
    this.send({ jsonrpc: '2.0', method, params });
  }

  startMultiFrames(): void {
    this.outbox ??= new Outbox(this.context.send, this.context.limits.maxPayloadBytes);
  }

  flush(): void {
    this.outbox?.flush();
  }

  /**
   * One frame: one message, or — once hello agreed on multi-message frames — an array of them,
   * each served as if it had come alone (its own rate token, its own answer when ready).
   */
  handleFrame(data: string | null): void {
    if (!this.open) return;
    if (data === null || !this.outbox) {
      this.handleMessage(data === null ? null : parseRequest(data));
      return;
    }
    const messages = parseMessages(data);
    if (!Array.isArray(messages)) {
      this.handleMessage(messages);
      return;
    }
    for (const message of messages) {
      if (!this.open) return;
      this.handleMessage(parseMessage(message, true));
    }
  }

  /** One message, parsed (null: a binary frame): refused, or served. */
  private handleMessage(parsed: RpcRequest | RpcRejection | null): void {
    if (!this.withinRate(parsed)) return;
    if (parsed === null) {
      this.reject(
        null,
        'invalid',
        new DlmError('INVALID_REQUEST', 'binary frames are not supported: send JSON text'),
      );
      return;
    }
    if ('error' in parsed) {
      // A method the server does not know is counted as `invalid`: label values stay a
      // closed set whatever clients send.
      this.reject(parsed.id, 'invalid', parsed.error);
      return;
    }
    const refusal = this.refusal(parsed);
    if (refusal) this.reject(parsed.id, parsed.method, refusal);
    else void this.serve(parsed);
  }

  close(): void {
    if (!this.open) return;
    this.open = false;
    for (const controller of this.waits ?? []) controller.abort();
    this.waits = undefined;
    for (const stop of this.watches.values()) stop();
    this.watches.clear();
    this.leases.clear();
  }

  private send(message: Record<string, unknown>): void {
    if (this.open) this.sendText(JSON.stringify(message));
  }

  /** One message's text: into the turn's outbox once multi-message frames were agreed. */
  private sendText(text: string): void {
    if (this.outbox) this.outbox.push(text);
    else this.context.send(text);
  }

  /** Closes the connection after what this session has sent, queued messages included. */
  private end(code: number, reason: string): void {
    this.flush();
    this.context.end(code, reason);
  }

  /**
   * Whether the frame is within the message rate. One over it is answered LIMIT_EXCEEDED; a
   * connection that goes on regardless is closed.
   */
  private withinRate(parsed: RpcRequest | RpcRejection | null): boolean {
    if (!this.bucket || this.bucket.take()) return true;
    const { context } = this;
    if (!this.overflow!.take()) {
      context.logger.warn('connection closed: message rate', {
        session: this.id,
        remoteAddress: context.remoteAddress,
      });
      context.metrics.connectionEnded('message_rate');
      this.end(CLOSE.LIMIT_EXCEEDED, 'message rate exceeded');
      this.close();
      return false;
    }
    const { messagesPerSecond, messageBurst } = context.limits;
    this.reject(
      parsed === null ? null : parsed.id,
      parsed === null || 'error' in parsed ? 'invalid' : parsed.method,
      new DlmError(
        'LIMIT_EXCEEDED',
        `at most ${messagesPerSecond} messages per second (bursts of ${messageBurst})`,
      ),
    );
    return false;
  }

  /** Why a well-formed request is not served now: no hello yet, or too many in flight. */
  private refusal(request: RpcRequest): DlmError | null {
    if (!this.helloDone && request.method !== 'session.hello') {
      return new DlmError('HELLO_REQUIRED', 'send session.hello first');
    }
    const { maxInflight } = this.context.limits;
    if (this.inflight >= maxInflight) {
      return new DlmError('LIMIT_EXCEEDED', `at most ${maxInflight} requests may be in flight`);
    }
    return null;
  }

  /**
   * Runs the request's handler and answers it. No async frame: the handler's promise gets one
   * `then`, so a backend that answers at once (embedded) is answered in the same turn.
   */
  private serve(request: RpcRequest): void {
    const startedAt = performance.now();
    // Only an acquire that waits can be cancelled (by the connection closing): only it gets a
    // controller, the other requests finish on their own within the backend's bound.
    const waitMs = WAITS.has(request.method) ? request.params.waitMs : undefined;
    const controller = typeof waitMs === 'number' && waitMs > 0 ? new AbortController() : undefined;
    if (controller) {
      this.waits ??= new Set();
      this.waits.add(controller);
    }
    this.inflight += 1;
    let answer: Promise<unknown>;
    try {
      answer = this.handlers[request.method](request.params, controller?.signal, request.id);
    } catch (error) {
      answer = Promise.reject(error);
    }
    answer.then(
      (result) => {
        try {
          this.succeeded(request, result, startedAt);
        } catch (error) {
          this.failed(request, error, startedAt);
        }
        this.settled(controller);
      },
      (error: unknown) => {
        this.failed(request, error, startedAt);
        this.settled(controller);
      },
    );
  }

  private succeeded(request: RpcRequest, result: unknown, startedAt: number): void {
    if (this.open) this.sendText(replyText(request.id, result));
    recordRequest(this.context.metrics, request, 'OK', startedAt);
  }

  private settled(controller: AbortController | undefined): void {
    this.inflight -= 1;
    if (controller) this.waits?.delete(controller);
  }

  /** Answers a request that failed; an UNAUTHENTICATED one also ends the connection. */
  private failed(request: RpcRequest, error: unknown, startedAt: number): void {
    const { context } = this;
    if (!isDlmError(error)) {
      context.logger.error('request failed with an internal error', {
        session: this.id,
        method: request.method,
        error: String(error),
      });
    }
    const rpcError = toRpcError(error);
    this.send({ jsonrpc: '2.0', id: request.id, error: rpcError });
    recordRequest(context.metrics, request, rpcError.data.code, startedAt, rpcError.data);
    if (rpcError.data.code === 'UNAUTHENTICATED') {
      context.metrics.connectionEnded('unauthenticated');
      context.logger.warn('authentication failed', {
        session: this.id,
        remoteAddress: context.remoteAddress,
      });
      this.end(CLOSE.UNAUTHENTICATED, 'unauthenticated');
    }
  }

  /** Answers a frame that is not served (protocol error, hello missing, too many in flight). */
  private reject(requestId: RpcRequestId | null, method: string, error: DlmError): void {
    this.send({ jsonrpc: '2.0', id: requestId, error: toRpcError(error) });
    this.context.metrics.request(method, error.code);
  }
}
