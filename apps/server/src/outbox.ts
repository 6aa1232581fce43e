import { packFrames } from '@dlm/protocol';

/**
 * A session's way out once it agreed on multi-message frames (`frames: "multi"` in
 * `session.hello`): the messages it sends in one turn of the event loop (replies and
 * notifications that were ready together) leave as one frame, a JSON array, when there are
 * several. A message never waits longer than the end of the turn it was ready in, so a reply
 * is never held back for another request's.
 */
export class Outbox {
  private pending: string[] = [];
  private scheduled = false;

  /**
   * @param write sends one text frame.
   * @param maxFrameBytes an array frame is cut before it would grow past this (one message
   *   larger than it still goes, alone).
   */
  constructor(
    private readonly write: (text: string) => unknown,
    private readonly maxFrameBytes: number,
  ) {}

  /** Queues one serialized message for the end of this turn. */
  push(text: string): void {
    this.pending.push(text);
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(this.flush);
  }

  /** Sends what is queued now (before closing the connection, for one). */
  readonly flush = (): void => {
    this.scheduled = false;
    const messages = this.pending;
    if (messages.length === 0) return;
    this.pending = [];
    for (const frame of packFrames(messages, this.maxFrameBytes)) this.write(frame);
  };
}
