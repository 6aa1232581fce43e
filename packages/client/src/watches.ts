import {
  type Limits,
  type LockMode,
  parseToken,
  type RetryOptions,
  type RetryPolicy,
  retryPolicy,
  validateName,
} from '@dlm/core';
import type { MethodName, NotificationParams, ParamsOf, ResultOf } from '@dlm/protocol';
import type { LockChange, LockWatch, RequestOptions } from './client.js';
import type { Connection } from './connection.js';
import { closedError } from './failures.js';

/** What watching needs from the client. */
export interface WatchContext {
  readonly connection: Connection;
  readonly closed: boolean;
  limits(): Limits;
  policyFor(retryOptions: RetryOptions | false | undefined, signal?: AbortSignal): RetryPolicy;
  request<M extends MethodName>(
    method: M,
    params: ParamsOf<M>,
    policy: RetryPolicy,
  ): Promise<ResultOf<M>>;
  reportError(error: unknown): void;
}

interface WatchState {
  name: string;
  onChange: (change: LockChange) => void;
  retry: RetryPolicy;
  watchId: string | undefined;
  establishing: boolean;
  stopped: boolean;
}

type ChangeOnTheWire = {
  name: string;
  held: boolean;
  owner?: string | undefined;
  token?: string | undefined;
  mode?: LockMode | undefined;
  holders?: number | undefined;
};

/**
 * The client's watch subscriptions. A watch id belongs to one session: after a reconnect every
 * watch is set up again, and its listener gets the state at that moment.
 */
export class Watches {
  private readonly all = new Set<WatchState>();
  private readonly byId = new Map<string, WatchState>();

  constructor(private readonly context: WatchContext) {}

  async start(
    name: string,
    onChange: (change: LockChange) => void,
    options: RequestOptions,
  ): Promise<LockWatch> {
    if (this.context.closed) throw closedError();
    validateName(name, this.context.limits());
    const watch: WatchState = {
      name,
      onChange,
      // The signal bounds setting the watch up, not the watch: not kept for re-establishing.
      retry: this.context.policyFor(options.retry),
      watchId: undefined,
      establishing: false,
      stopped: false,
    };
    this.all.add(watch);
    try {
      await this.establish(watch, options.signal);
    } catch (error) {
      this.all.delete(watch);
      throw error;
    }
    return { stop: () => this.stop(watch) };
  }

  /** `lock.changed`. */
  changed(params: NotificationParams<'lock.changed'>): void {
    const watch = this.byId.get(params.watchId);
    if (!watch || watch.stopped) return;
    const { name, held, owner, token, mode, holders } = params;
    this.deliver(watch, { name, held, owner, token, mode, holders });
  }

  /** A new session: set up again every watch the old one took with it. */
  reestablish(): void {
    for (const watch of this.all) {
      if (!watch.stopped && !watch.establishing && watch.watchId === undefined) {
        this.establish(watch).catch((error: unknown) => this.context.reportError(error));
      }
    }
  }

  /** Watch ids belong to the session that is gone. */
  sessionDown(): void {
    for (const watch of this.all) watch.watchId = undefined;
    this.byId.clear();
  }

  stopAll(): void {
    for (const watch of this.all) watch.stopped = true;
    this.all.clear();
    this.byId.clear();
  }

  private async stop(watch: WatchState): Promise<void> {
    if (watch.stopped) return;
    watch.stopped = true;
    this.all.delete(watch);
    const { watchId } = watch;
    if (watchId === undefined) return;
    this.byId.delete(watchId);
    await this.context.connection.call('lock.unwatch', { watchId }).then(
      () => {},
      () => {},
    );
  }

  private async establish(watch: WatchState, signal?: AbortSignal): Promise<void> {
    watch.establishing = true;
    try {
      const policy = signal ? retryPolicy({ signal }, watch.retry) : watch.retry;
      const result = await this.context.request('lock.watch', { name: watch.name }, policy);
      if (watch.stopped) {
        this.context.connection.call('lock.unwatch', { watchId: result.watchId }).catch(() => {});
        return;
      }
      watch.watchId = result.watchId;
      this.byId.set(result.watchId, watch);
      this.deliver(watch, { name: watch.name, held: result.held, token: result.token });
    } finally {
      watch.establishing = false;
    }
  }

  private deliver(watch: WatchState, change: ChangeOnTheWire): void {
    let token: bigint | undefined;
    try {
      token = change.token === undefined ? undefined : parseToken(change.token);
    } catch {}
    try {
      watch.onChange({
        name: change.name,
        held: change.held,
        ...(change.owner === undefined ? {} : { owner: change.owner }),
        ...(token === undefined ? {} : { token }),
        ...(change.mode === undefined ? {} : { mode: change.mode }),
        ...(change.holders === undefined ? {} : { holders: change.holders }),
      });
    } catch (error) {
      this.context.reportError(error);
    }
  }
}
