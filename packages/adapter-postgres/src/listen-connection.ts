import { backoffDelayMs, type Clock, type Timer } from '@dlm/core';
import type pg from 'pg';
import { query } from './calls.js';

/**
 * One pooled connection kept `LISTEN`ing on a channel: opened again (with a growing, jittered
 * delay) whenever it fails, and checked by a heartbeat, since a stalled server sends no error.
 */

export interface ListenConnectionOptions {
  pool: pg.Pool;
  channel: string;
  clock: Clock;
  timeoutMs: number;
  /** How often the listening connection is checked. */
  heartbeatMs: number;
  /** A notification on the channel (its payload, if any). */
  onNotification: (payload: string | undefined) => void;
  /** The `LISTEN` is in place; `connects` tells the first time (1) from a reconnect. */
  onListening: (connects: number) => void;
}

/** Reconnect delays: core's jittered backoff, up to 100 ms doubling to 2 s (no stampede). */
const RECONNECT_BACKOFF = { initialDelayMs: 100, maxDelayMs: 2_000 };

export class ListenConnection {
  private closed = false;
  private client: pg.PoolClient | undefined;
  private listeningNow = false;
  private pid: number | undefined;
  private connectCount = 0;
  private heartbeat: Timer | undefined;
  private reconnectTimer: Timer | undefined;
  private failure: string | undefined;
  private settleFirstAttempt: () => void = () => {};
  /** Resolves once the first attempt to listen succeeded or failed. */
  readonly firstAttempt = new Promise<void>((resolve) => {
    this.settleFirstAttempt = resolve;
  });

  /** Starts connecting at once (on the next timer tick). */
  constructor(private readonly options: ListenConnectionOptions) {
    this.scheduleConnect(0);
  }

  get isListening(): boolean {
    return this.listeningNow;
  }

  /** How many times the listening connection was (re)established. */
  get connects(): number {
    return this.connectCount;
  }

  /** The database's process id of the listening connection, while there is one. */
  get sessionPid(): number | undefined {
    return this.listeningNow ? this.pid : undefined;
  }

  /** Why the last attempt to listen failed, until one succeeds. */
  get lastFailure(): string | undefined {
    return this.failure;
  }

  close(): void {
    this.closed = true;
    this.reconnectTimer?.cancel();
    this.heartbeat?.cancel();
    const held = this.client;
    this.client = undefined;
    held?.release(true);
  }

  private dropped(from: pg.PoolClient): void {
    if (this.client !== from) return;
    this.client = undefined;
    this.listeningNow = false;
    this.heartbeat?.cancel();
    this.heartbeat = undefined;
    from.release(true);
    if (!this.closed) this.scheduleConnect(0);
  }

  private scheduleConnect(attempt: number): void {
    this.reconnectTimer = this.options.clock.setTimer(
      () => void this.connect(attempt),
      attempt === 0 ? 0 : backoffDelayMs(RECONNECT_BACKOFF, attempt),
    );
  }

  /** A pooled connection that LISTENs on the channel, or undefined (a retry is scheduled). */
  private async openListener(attempt: number): Promise<pg.PoolClient | undefined> {
    const { pool, channel, timeoutMs } = this.options;
    let next: pg.PoolClient | undefined;
    try {
      next = await pool.connect();
      const opened = next;
      opened.on('error', () => this.dropped(opened));
      opened.on('end', () => this.dropped(opened));
      opened.on('notification', (notification) => {
        if (notification.channel === channel) this.options.onNotification(notification.payload);
      });
      await query(opened, `LISTEN "${channel}"`, [], timeoutMs);
      const session = await query(opened, 'SELECT pg_backend_pid() AS pid', [], timeoutMs);
      this.pid = (session.rows[0] as { pid: number }).pid;
      return opened;
    } catch (error) {
      // Not `client` yet, so `dropped` left it alone: released here, once.
      next?.release(true);
      this.failure = error instanceof Error ? error.message : String(error);
      this.settleFirstAttempt();
      if (!this.closed) this.scheduleConnect(attempt + 1);
      return undefined;
    }
  }

  private async connect(attempt: number): Promise<void> {
    if (this.closed) return;
    const next = await this.openListener(attempt);
    if (!next) return;
    if (this.closed) {
      next.release(true);
      return;
    }
    this.client = next;
    this.listeningNow = true;
    this.failure = undefined;
    this.settleFirstAttempt();
    this.connectCount += 1;
    this.beat(next);
    this.options.onListening(this.connectCount);
  }

  private beat(on: pg.PoolClient): void {
    this.heartbeat = this.options.clock.setTimer(() => {
      if (this.client !== on) return;
      query(on, 'SELECT 1', [], this.options.timeoutMs).then(
        () => {
          if (this.client === on) this.beat(on);
        },
        () => this.dropped(on),
      );
    }, this.options.heartbeatMs);
  }
}
