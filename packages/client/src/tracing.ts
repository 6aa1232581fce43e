import { isDlmError } from '@dlm/core';
import { formatTraceparent } from '@dlm/protocol';
// Types only: erased from the build, so the client runs where the package is not installed.
import type * as OpenTelemetry from '@opentelemetry/api';

/**
 * OpenTelemetry in the client, when the application has it: `@opentelemetry/api` is an optional
 * peer dependency, loaded on first use. As a peer the client uses the application's own copy,
 * the one its SDK registered with (a second copy of the API may not see that registration); and
 * without it installed the client works as before, untraced. The API itself is a no-op until
 * the application registers an SDK.
 */

type Api = typeof OpenTelemetry;

/** The API once loaded; null when it is not installed. */
let api: Api | null | undefined;
let loading: Promise<Api | null> | undefined;

/** Loads `@opentelemetry/api` once; resolves with null when the application does not have it. */
export function loadTracing(): Promise<Api | null> {
  loading ??= import('@opentelemetry/api').then(
    (module) => {
      api = module;
      return module;
    },
    () => {
      api = null;
      return null;
    },
  );
  return loading;
}

function traceparentOf(span: OpenTelemetry.Span | undefined): string | undefined {
  if (!api || !span) return undefined;
  const { traceId, spanId, traceFlags } = span.spanContext();
  if (!api.isSpanContextValid({ traceId, spanId, traceFlags })) return undefined;
  return formatTraceparent({ traceId, parentId: spanId, flags: traceFlags });
}

/**
 * The `traceparent` of the caller's active span, if the API is loaded and a span is active: what
 * a request sends so that the server's spans join the caller's trace.
 */
export function activeTraceparent(): string | undefined {
  if (!api) return undefined;
  return traceparentOf(api.trace.getSpan(api.context.active()));
}

/** Runs `run` outside any trace: background work (renewals) is nobody's request. */
export function untraced<T>(run: () => T): T {
  return api ? api.context.with(api.ROOT_CONTEXT, run) : run();
}

/**
 * The application's tracer, or undefined while no SDK is registered (the global provider is
 * then a proxy with no delegate): making a no-op span and context per request cost a few
 * percent of a busy client's CPU.
 */
function registeredTracer(otel: Api, version: string): OpenTelemetry.Tracer | undefined {
  const provider = otel.trace.getTracerProvider();
  if (provider instanceof otel.ProxyTracerProvider) {
    return provider.getDelegateTracer('@dlm/client', version);
  }
  return provider.getTracer('@dlm/client', version);
}

/**
 * Whether a call needs no client span: `@opentelemetry/api` is known to be absent, or no SDK is
 * registered. Such a call skips `withClientSpan` and builds nothing for it; it sends the
 * caller's context as `withClientSpan` would (`activeTraceparent()`).
 */
export function spanless(version: string): boolean {
  if (api === null) return true;
  return api !== undefined && registeredTracer(api, version) === undefined;
}

/** Codes that say the service failed, rather than that the request was refused. */
const FAULTS: ReadonlySet<string> = new Set(['UNAVAILABLE', 'INTERNAL']);

/** A client span: its name (the method), first attributes, and what a success adds. */
export interface ClientSpan<T> {
  method: string;
  attributes: OpenTelemetry.Attributes;
  /** `dlm.outcome` on success (a failure's is its error code). */
  outcome: string;
  /** Attributes of the result. */
  describe(result: T): OpenTelemetry.Attributes;
}

/**
 * Runs `run` inside a client span, a child of the caller's active span; `run` gets the span's
 * `traceparent` to send (undefined when nothing is traced). The span ends when `run` settles.
 */
export async function withClientSpan<T>(
  version: string,
  { method, attributes, outcome, describe }: ClientSpan<T>,
  run: (traceparent: string | undefined) => Promise<T>,
): Promise<T> {
  const otel = api === undefined ? await loadTracing() : api;
  if (!otel) return run(undefined);
  const tracer = registeredTracer(otel, version);
  // No SDK: no span to make, only the caller's context (if any) to send on.
  if (!tracer) return run(activeTraceparent());
  const span = tracer.startSpan(
    method,
    {
      kind: otel.SpanKind.CLIENT,
      attributes: { 'rpc.system': 'jsonrpc', 'rpc.method': method, ...attributes },
    },
    otel.context.active(),
  );
  // A span that records nothing still carries its parent's context: send that on.
  const traceparent = traceparentOf(span) ?? activeTraceparent();
  try {
    const result = await otel.context.with(otel.trace.setSpan(otel.context.active(), span), () =>
      run(traceparent),
    );
    span.setAttributes(Object.assign({}, describe(result), { 'dlm.outcome': outcome }));
    return result;
  } catch (error) {
    const code = isDlmError(error) ? error.code : 'INTERNAL';
    span.setAttributes({ 'error.type': code, 'dlm.outcome': code });
    if (FAULTS.has(code)) {
      span.setStatus({
        code: otel.SpanStatusCode.ERROR,
        message: error instanceof Error ? error.message : String(error),
      });
    }
    throw error;
  } finally {
    span.end();
  }
}
