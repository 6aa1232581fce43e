import { performance } from 'node:perf_hooks';
import type { MethodName } from '@dlm/protocol';
import type WebSocket from 'ws';
import { idKey, schemaProblem, show } from './frames.js';

/** A frame the server sent, with when it arrived and whether a step has matched it. */
export interface Received {
  frame: unknown;
  at: number;
  consumed: boolean;
}

/**
 * One named connection of a transcript: its socket, what arrived on it, and the problems seen
 * with what arrived (a bad frame fails the step that is running, or the next one).
 */
export class Connection {
  ws: WebSocket | undefined;
  received: Received[] = [];
  closed: { code: number; reason: string; at: number } | undefined;
  readonly problems: string[] = [];
  private readonly wakers = new Set<() => void>();
  /** Request id → method, to check results against the right schema. */
  private readonly methods = new Map<string, MethodName>();

  constructor(readonly name: string) {}

  get isOpen(): boolean {
    return this.ws !== undefined && this.closed === undefined;
  }

  unconsumed(): Received[] {
    return this.received.filter((item) => !item.consumed);
  }

  /** Notes a sent request's method, so its result is checked against that method's schema. */
  remember(frame: unknown): void {
    if (typeof frame !== 'object' || frame === null) return;
    const { id, method } = frame as { id?: unknown; method?: unknown };
    if (id !== undefined && typeof method === 'string') {
      this.methods.set(idKey(id), method as MethodName);
    }
  }

  /** Waits until `ready()` or the deadline (woken by every frame and the close); true when ready. */
  async waitFor(ready: () => boolean, deadline: number): Promise<boolean> {
    for (;;) {
      if (ready()) return true;
      const left = deadline - performance.now();
      if (left <= 0) return false;
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          this.wakers.delete(done);
          resolve();
        };
        const timer = setTimeout(done, left);
        this.wakers.add(done);
      });
    }
  }

  /**
   * Takes over a socket that has just opened: a fresh history, frames recorded as they come.
   * With `multi` (multi-message frames), an array frame is recorded as its messages, each
   * arriving when the frame did; without it, an array frame is a problem.
   */
  adopt(ws: WebSocket, checkSchemas: boolean, multi = false): void {
    this.ws = ws;
    this.closed = undefined;
    this.received = [];
    this.methods.clear();
    ws.on('message', (data, isBinary) =>
      this.arrived(data.toString(), isBinary, checkSchemas, multi),
    );
    ws.on('close', (code, reason) => {
      this.closed = { code, reason: reason.toString(), at: performance.now() };
      this.wake();
    });
  }

  private arrived(text: string, isBinary: boolean, checkSchemas: boolean, multi: boolean): void {
    const at = performance.now();
    if (isBinary) {
      this.problems.push('the server sent a binary frame');
      this.wake();
      return;
    }
    let frame: unknown;
    try {
      frame = JSON.parse(text);
    } catch {
      this.problems.push(`the server sent a frame that is not JSON: ${text}`);
      this.wake();
      return;
    }
    for (const message of this.messagesOf(frame, multi)) {
      if (checkSchemas) {
        const problem = schemaProblem(this.methods, message);
        if (problem) this.problems.push(`${problem}: ${show(message)}`);
      }
      this.received.push({ frame: message, at, consumed: false });
    }
    this.wake();
  }

  /** The messages of a frame: itself, or on a multi-message connection an array's members. */
  private messagesOf(frame: unknown, multi: boolean): unknown[] {
    if (!Array.isArray(frame)) return [frame];
    if (!multi) {
      this.problems.push(
        `the server sent an array frame on a connection that did not ask for multi-message frames: ${show(frame)}`,
      );
      return [];
    }
    if (frame.length === 0) this.problems.push('the server sent an empty array frame');
    return frame;
  }

  private wake(): void {
    for (const waker of [...this.wakers]) waker();
  }
}
