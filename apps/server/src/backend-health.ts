import { performance } from 'node:perf_hooks';
import { DlmError, type LockBackend } from '@dlm/core';
import type { Logger } from './logger.js';

/** How often and how patiently the server checks that its backend answers. */
export interface HealthOptions {
  /** Time between two probes of the backend. Default 1 000. */
  intervalMs?: number;
  /** A probe without an answer within this long counts as a failure. Default 1 000. */
  timeoutMs?: number;
}

/** What `/readyz` and `dlm_backend_up` report. */
export interface Readiness {
  ready: boolean;
  /** Why not, in words (the last error, or that the backend never answered yet). */
  reason?: string;
  /** Milliseconds since the backend last answered; absent before it first did. */
  lastAnsweredMsAgo?: number;
}

export interface BackendHealth {
  /** The backend answered a probe or a call recently enough (see `createBackendHealth`). */
  readiness(): Readiness;
  /**
   * What a real backend call found: a success proves the backend answers as much as a probe,
   * an UNAVAILABLE failure takes the server out of rotation at once, before the next probe.
   */
  observe(error?: DlmError): void;
  /** Runs the first probe; resolves when it has answered or timed out (never rejects). */
  start(): Promise<void>;
  stop(): void;
}

/** The name `inspect` probes with when the adapter has no `ping`: any valid name will do. */
const PROBE_NAME = 'dlm/readiness-probe';

/**
 * One probe: `ping()` when the adapter has it, else `inspect` of a fixed name. Rejects with
 * UNAVAILABLE when there is no answer within `timeoutMs`.
 */
function probeWithin(backend: LockBackend, timeoutMs: number): Promise<void> {
  const call = backend.ping ? backend.ping() : backend.inspect(PROBE_NAME).then(() => {});
  let expire: NodeJS.Timeout | undefined;
  const bounded = new Promise<void>((_, reject) => {
    expire = setTimeout(
      () => reject(new DlmError('UNAVAILABLE', `no answer within ${timeoutMs} ms`)),
      timeoutMs,
    );
  });
  return Promise.race([call, bounded]).finally(() => clearTimeout(expire));
}

/**
 * Keeps track of whether the backend answers: a probe (`ping()` when the adapter has it, else
 * `inspect` of a fixed name) every `intervalMs`, bounded by `timeoutMs`, plus what real calls
 * observe. Ready means the last answer, from either, came within `intervalMs + timeoutMs` and
 * nothing failed with UNAVAILABLE since; before the backend first answered it is not ready.
 * The log gets one line per transition: `backend connected` the first time it answers,
 * `backend unavailable` when it stops, `backend connected again` when it is back.
 */
export function createBackendHealth(
  backend: LockBackend,
  logger: Logger,
  describe: Record<string, unknown>,
  options: HealthOptions = {},
): BackendHealth {
  const intervalMs = options.intervalMs ?? 1_000;
  const timeoutMs = options.timeoutMs ?? 1_000;
  let up = false;
  let everUp = false;
  let lastOkAt = Number.NEGATIVE_INFINITY;
  let reason = 'the backend has not answered yet';
  let timer: NodeJS.Timeout | undefined;
  let probing: Promise<void> | undefined;
  let stopped = false;
  let toldNotYet = false;

  function succeeded(): void {
    lastOkAt = performance.now();
    if (up) return;
    up = true;
    if (everUp) logger.info('backend connected again', { backend: backend.kind });
    else logger.info('backend connected', describe);
    everUp = true;
  }

  function failed(message: string): void {
    reason = message;
    if (up) {
      up = false;
      logger.warn('backend unavailable', { backend: backend.kind, error: message });
    } else if (!everUp && !toldNotYet) {
      // Before the first answer every probe fails: one line says why the server is not ready.
      toldNotYet = true;
      logger.warn('backend unavailable', { backend: backend.kind, error: message });
    }
  }

  /** Starts a probe; `probing` holds it until it settles. */
  function startProbe(): Promise<void> {
    probing = probeWithin(backend, timeoutMs)
      .then(succeeded, (error: unknown) =>
        failed(error instanceof Error ? error.message : String(error)),
      )
      .finally(() => {
        probing = undefined;
      });
    return probing;
  }

  function schedule(): void {
    if (stopped) return;
    timer = setTimeout(() => {
      // A probe settles by its time-out; only with a time-out longer than the interval can one
      // still be out here, and then one at a time is enough.
      if (!probing) startProbe();
      schedule();
    }, intervalMs);
    timer.unref();
  }

  return {
    readiness() {
      if (!up) return { ready: false, reason };
      const agoMs = performance.now() - lastOkAt;
      if (agoMs > intervalMs + timeoutMs) {
        return {
          ready: false,
          reason: `the backend has not answered for ${Math.round(agoMs)} ms`,
          lastAnsweredMsAgo: Math.round(agoMs),
        };
      }
      return { ready: true, lastAnsweredMsAgo: Math.round(agoMs) };
    },
    observe(error) {
      if (error === undefined) succeeded();
      else if (error.code === 'UNAVAILABLE') failed(error.message);
    },
    async start() {
      await startProbe();
      schedule();
    },
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
