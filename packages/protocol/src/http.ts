import { type MethodName, Methods } from './schemas.js';

/**
 * The methods that need a session (a connection that lives on): the hello, the ping, and
 * watches, whose notifications have no reply to travel in. Every other method, `lock.*` methods
 * added later included, is served over `POST /v1/rpc` too.
 */
const SESSION_METHODS: ReadonlySet<MethodName> = new Set([
  'session.hello',
  'session.ping',
  'lock.watch',
  'lock.unwatch',
  'lock.watchPrefix',
]);

/** Whether `method` is served over `POST /v1/rpc` (else it is WebSocket-only). */
export function isHttpMethod(method: string): method is MethodName {
  return Object.hasOwn(Methods, method) && !SESSION_METHODS.has(method as MethodName);
}

/** The methods `POST /v1/rpc` serves, in the order of `Methods`. */
export function httpMethods(): MethodName[] {
  return (Object.keys(Methods) as MethodName[]).filter(isHttpMethod);
}
