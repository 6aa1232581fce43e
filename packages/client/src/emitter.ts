import { getOrCreate } from '@dlm/core';

/** A listener that throws is reported here instead of breaking the client. */
export type ListenerErrorHandler<Events> = (error: unknown, event: keyof Events) => void;

export interface Emitter<Events> {
  /** Adds a listener; returns the function that removes it. */
  on<E extends keyof Events>(event: E, listener: (payload: Events[E]) => void): () => void;
  emit<E extends keyof Events>(event: E, payload: Events[E]): void;
  clear(): void;
}

/**
 * A typed event emitter small enough to read at a glance. Unlike Node's `EventEmitter`, an
 * `error` event without listeners is dropped, not thrown: a client that loses its connection
 * must not crash a process that never subscribed.
 */
export function createEmitter<Events>(
  onListenerError?: ListenerErrorHandler<Events>,
): Emitter<Events> {
  const listeners = new Map<keyof Events, Set<(payload: never) => void>>();
  return {
    on(event, listener) {
      const set = getOrCreate(listeners, event, () => new Set());
      set.add(listener);
      return () => {
        set.delete(listener);
      };
    },
    emit(event, payload) {
      const set = listeners.get(event);
      if (!set) return;
      for (const listener of [...set]) {
        try {
          (listener as (payload: Events[typeof event]) => void)(payload);
        } catch (error) {
          onListenerError?.(error, event);
        }
      }
    },
    clear() {
      listeners.clear();
    },
  };
}
