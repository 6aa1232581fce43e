import { afterAll } from 'vitest';

/**
 * Starts a service for the enclosing `describe` (when `run`), right away so that its tests
 * share one start-up, and stops it after them. The returned function resolves with the
 * service; only tests that run (so `run` was true) call it.
 */
export function serviceFor<T extends { stop(): Promise<void> }>(
  run: boolean,
  start: () => Promise<T>,
): () => Promise<T> {
  const started = run ? start() : undefined;
  afterAll(async () => (await started)?.stop());
  return async () => (await started)!;
}
