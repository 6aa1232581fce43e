/**
 * The payload of the NOTIFY that the statements granting, releasing and revoking send, and
 * those of the fair queue (built by `notify` in sql.ts, and in shared-sql.ts): a JSON object
 * with one-letter keys.
 */

export interface Message {
  /**
   * `left`: a fair-queue entry (id `k`) left the queue (granted or gone). `asked`: a release
   * request (`requestMessage`), with its reason in `r`.
   */
  t: 'acquired' | 'released' | 'revoked' | 'left' | 'asked';
  n: string;
  k: string;
  o: string;
  ms: number;
  /** `shared` on a shared holder's change. */
  m?: string;
  /** The number of holders after a shared change. */
  h?: number;
  /** `asked`: the request's reason, when it has one. */
  r?: string;
}

/** The payload of a release request for `name` (sent with `pg_notify` by `requestRelease`). */
export function requestMessage(name: string, reason: string | undefined): string {
  const message: Message = { t: 'asked', n: name, k: '0', o: '', ms: 0 };
  if (reason !== undefined) message.r = reason;
  return JSON.stringify(message);
}

const DIGITS = /^[0-9]+$/;

/** The message in `payload`, or undefined when it is not one (what else comes is ignored). */
export function parseMessage(payload: string | undefined): Message | undefined {
  if (!payload) return undefined;
  try {
    const message = JSON.parse(payload) as Partial<Message>;
    if (
      (message.t === 'acquired' ||
        message.t === 'released' ||
        message.t === 'revoked' ||
        message.t === 'left' ||
        message.t === 'asked') &&
      typeof message.n === 'string' &&
      typeof message.k === 'string' &&
      DIGITS.test(message.k) &&
      typeof message.o === 'string'
    ) {
      return message as Message;
    }
  } catch {}
  return undefined;
}
