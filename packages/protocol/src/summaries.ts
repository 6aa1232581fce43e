import type { MethodName, NotificationName } from './schemas.js';

/** One line per method and notification; a method added later without one gets its name. */
const SUMMARIES: Partial<Record<MethodName | NotificationName, string>> = {
  'session.hello': 'Open the session: must be the first request on a connection.',
  'session.ping': 'Check that the connection and the session are alive.',
  'lock.acquire':
    "Acquire a lock, exclusive (the default) or shared (a read lock, or with limit N a semaphore of N permits): a try-lock with waitMs 0, else wait server-side (one FIFO queue for both modes) up to waitMs. The grant carries the lease's secret leaseKey, to this caller only.",
  'lock.acquireAll':
    'Extension: acquire several locks (each exclusive or shared), all or nothing, in one canonical order (no deadlock among concurrent calls); on failure none of them is held when the error is sent, and data.name names the lock that could not be had.',
  'lock.release':
    "Release a lock held with this token: with the lease's leaseKey from any session, without it only from the session that was granted it (NOT_HOLDER otherwise).",
  'lock.extend':
    'Restart the lease at ttlMs from now; the same leaseKey rule as lock.release (NOT_HOLDER when it already ended or the key is missing or wrong).',
  'lock.get':
    "Read a lock's current holders: the highest-token one's owner, token and lease left, its mode (and limit), and every holder by token.",
  'lock.check':
    'Extension: whether a lease with this token holds the name now (for a shared name: the token is among the holders). Read-only, allowed wherever lock.get is: for a resource that cannot store a token but can ask.',
  'lock.watch': "Subscribe to a lock's grants, releases and expiries (lock.changed).",
  'lock.unwatch': 'End a watch.',
  'lock.watchPrefix':
    'Extension: list the held locks under a name prefix, then report their changes (lock.changed).',
  'lock.changed':
    'A holder of a watched lock was granted, released or expired (one notification per holder), with the mode of that lease and the holders left.',
  'lock.requestRelease':
    'Extension: ask every current holder of a lock (on any server sharing the backend) to let go; nothing is released. notified: the holders asked.',
  'lock.releaseRequested':
    'Someone asked the holder of this lease (acquired or last extended by this session) to let go; it is still held.',
  'lock.queued':
    "Extension: a waiting lock.acquire sent with progress: true started waiting, or its place among the waiters changed (requestId: the acquire's id, position: 1-based).",
  'lock.lost': 'A lease this session acquired (or last extended) ended other than by release.',
};

/** The one-line summary of a method or notification (its name when it has none). */
export function summary(method: MethodName | NotificationName): string {
  return SUMMARIES[method] ?? method;
}

/** A schema as plain JSON: TypeBox schemas carry symbol keys, a JSON round trip drops them. */
export function jsonCopy<T>(value: T): T {
  return JSON.parse(JSON.stringify(value)) as T;
}
