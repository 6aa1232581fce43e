import { type AroundBackendCall, isDlmError } from '@dlm/core';
import { parseTraceparent } from '@dlm/protocol';
import {
  type Attributes,
  type Context,
  context,
  ProxyTracerProvider,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  trace,
} from '@opentelemetry/api';

/**
 * OpenTelemetry spans for the requests a session serves, through `@opentelemetry/api` only: a
 * no-op until the process registers an SDK (a tracer provider), then one span per traced request
 * with the backend calls made for it as child spans. Core knows nothing of this: it runs each
 * backend call of a request through that request's `aroundBackendCall`, which opens the span.
 */

/** What a handler may add to its request's span. */
export interface RequestTrace {
  /** Whether the span records: without it, a handler need not make attributes at all. */
  readonly recording: boolean;
  /** Adds attributes to the request's span (nothing when it records nothing). */
  set(attributes: Attributes): void;
  /** Opens a child span per backend call; undefined when the request's span records nothing. */
  readonly aroundBackendCall: AroundBackendCall | undefined;
}

export interface RequestTracer {
  /**
   * Runs `handle` inside a server span named after `method`, a child of the request's
   * `traceparent` when it has a valid one (an invalid one is ignored: a new trace, as the
   * protocol says), else the root of a new trace. The span ends when `handle` settles: its
   * `dlm.outcome` is `outcome` on success, the error's code on failure.
   */
  trace<T>(
    method: string,
    params: Record<string, unknown>,
    outcome: string,
    handle: (request: RequestTrace) => Promise<T>,
  ): Promise<T>;
}

/** Codes that say the server or its backend failed, rather than that the request was refused. */
const SERVER_FAULTS: ReadonlySet<string> = new Set(['UNAVAILABLE', 'INTERNAL']);

const UNTRACED: RequestTrace = { recording: false, set() {}, aroundBackendCall: undefined };
const SERVER_SPAN = { kind: SpanKind.SERVER } as const;

/**
 * The parent a request's span gets: the caller's span from its `traceparent`, else none. Never
 * the ambient context: a WebSocket message handler runs in the context of the connection's
 * upgrade, which has nothing to do with this request.
 */
function parentOf(params: Record<string, unknown>): Context {
  if (params.traceparent === undefined) return ROOT_CONTEXT;
  const parent = parseTraceparent(params.traceparent);
  if (!parent) return ROOT_CONTEXT;
  return trace.setSpanContext(ROOT_CONTEXT, {
    traceId: parent.traceId,
    spanId: parent.parentId,
    traceFlags: parent.flags,
    isRemote: true,
  });
}

/** The stable code of a failure, for `error.type` and `dlm.outcome`. */
function codeOf(error: unknown): string {
  return isDlmError(error) ? error.code : 'INTERNAL';
}

function fail(span: Span, error: unknown, isServerFault: boolean): void {
  const code = codeOf(error);
  span.setAttributes({ 'error.type': code, 'dlm.outcome': code });
  if (isServerFault) {
    span.setStatus({
      code: SpanStatusCode.ERROR,
      message: error instanceof Error ? error.message : String(error),
    });
  }
}

/** Child spans for the backend calls of the request whose span is `parent`. */
function backendSpans(tracer: Tracer, parent: Span, backendKind: string): AroundBackendCall {
  const parentContext = trace.setSpan(ROOT_CONTEXT, parent);
  return (operation, call) => {
    const span = tracer.startSpan(
      `backend.${operation}`,
      {
        kind: SpanKind.CLIENT,
        attributes: { 'dlm.backend.kind': backendKind, 'dlm.backend.operation': operation },
      },
      parentContext,
    );
    // Active while the adapter runs: its client library's own instrumentation nests under it.
    return context.with(trace.setSpan(parentContext, span), call).then(
      (value) => {
        span.end();
        return value;
      },
      (error: unknown) => {
        fail(span, error, true);
        span.end();
        throw error;
      },
    );
  };
}

/**
 * Whether an SDK is registered: until then the global provider is a proxy with no delegate, and
 * every span it makes is a non-recording one.
 */
function sdkRegistered(version: string): boolean {
  const provider = trace.getTracerProvider();
  if (!(provider instanceof ProxyTracerProvider)) return true;
  return provider.getDelegateTracer('@dlm/server', version) !== undefined;
}

/** `handle` inside `span`, which records; the span ends when it settles. */
async function traceRecording<T>(
  span: Span,
  outcome: string,
  handle: (request: RequestTrace) => Promise<T>,
  request: RequestTrace,
): Promise<T> {
  try {
    const result = await handle(request);
    span.setAttribute('dlm.outcome', outcome);
    return result;
  } catch (error) {
    fail(span, error, SERVER_FAULTS.has(codeOf(error)));
    throw error;
  } finally {
    span.end();
  }
}

/** The tracer of one server: `version` and `backendKind` label its spans. */
export function createRequestTracer(version: string, backendKind: string): RequestTracer {
  // A proxy until an SDK is registered, then the SDK's tracer: getting it once is enough.
  const tracer = trace.getTracer('@dlm/server', version);
  return {
    trace(method, params, outcome, handle) {
      // No SDK registered: no span to make, and no async frame around the handler either.
      if (!sdkRegistered(version)) return handle(UNTRACED);
      const span = tracer.startSpan(method, SERVER_SPAN, parentOf(params));
      // Not sampled: nothing more is made per request.
      if (!span.isRecording()) {
        span.end();
        return handle(UNTRACED);
      }
      span.setAttributes({
        'rpc.system': 'jsonrpc',
        'rpc.method': method,
        'dlm.backend.kind': backendKind,
      });
      return traceRecording(span, outcome, handle, {
        recording: true,
        set: (attributes) => span.setAttributes(attributes),
        aroundBackendCall: backendSpans(tracer, span, backendKind),
      });
    },
  };
}
