/**
 * The payload of the NOTIFY that the statements granting, releasing and revoking send, and
 * those of the fair queue (built by `notify` in sql.ts, and in shared-sql.ts): a JSON object
 * with one-letter keys.
 */

export interface Message {
  /** `left`: a fair-queue entry (id `k`) left the queue (granted or gone). */
  t: 'acquired' | 'released' | 'revoked' | 'left';
  n: string;
  k: string;
  o: string;
  ms: number;
  /** `shared` on a shared holder's change. */
  m?: string;
  /** The number of holders after a shared change. */
  h?: number;
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
        message.t === 'left') &&
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
