/**
 * W3C Trace Context's `traceparent` (https://www.w3.org/TR/trace-context/#traceparent-header),
 * which any request's params may carry: the caller's trace, so that the server's spans for the
 * request join it. Pure string handling: the protocol knows no tracing library.
 */

/** The parts of a valid `traceparent`. `flags` bit 0 is "sampled". */
export interface TraceParent {
  traceId: string;
  parentId: string;
  flags: number;
}

/**
 * The shape of a `traceparent`: version, trace id, parent (span) id, flags, in lowercase hex.
 * A future version may append fields after a `-`.
 */
export const TRACEPARENT_PATTERN = '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?$';

const SHAPE = new RegExp(TRACEPARENT_PATTERN);
const ZERO_TRACE = '0'.repeat(32);
const ZERO_PARENT = '0'.repeat(16);

/**
 * The trace context `value` carries, or undefined when it is not a valid `traceparent`: not a
 * string, the wrong shape, version `ff`, version `00` with more fields, or an all-zero id. A
 * receiver ignores an invalid one and starts a new trace, as the W3C recommendation says.
 */
export function parseTraceparent(value: unknown): TraceParent | undefined {
  if (typeof value !== 'string' || value.length > 512 || !SHAPE.test(value)) return undefined;
  const version = value.slice(0, 2);
  if (version === 'ff' || (version === '00' && value.length !== 55)) return undefined;
  const traceId = value.slice(3, 35);
  const parentId = value.slice(36, 52);
  if (traceId === ZERO_TRACE || parentId === ZERO_PARENT) return undefined;
  return { traceId, parentId, flags: Number.parseInt(value.slice(53, 55), 16) };
}

/** A version-00 `traceparent` for the given span. */
export function formatTraceparent({ traceId, parentId, flags }: TraceParent): string {
  return `00-${traceId}-${parentId}-${(flags & 0xff).toString(16).padStart(2, '0')}`;
}
