import type { LockBackend } from './backend.js';
import type { NameState } from './name-state.js';
import type { BackendQueue, QueueDriver } from './queue-driver.js';

/**
 * One waiter's place among this service's waiters of a name (`lock.queued`): `tell` hears its
 * 1-based position when it starts waiting and whenever it changes; `told` is the last one told.
 */
export interface QueuePlace {
  readonly tell: ((position: number) => void) | undefined;
  told: number;
}

/** The waiter starts waiting (it had to sleep): it takes the last place, and is told it. */
export function enterQueue(state: NameState, place: QueuePlace): void {
  state.places ??= [];
  state.places.push(place);
  tellPositions(state);
}

/** The waiter is done (granted, refused, gave up): everyone behind it moves up, and is told. */
export function leaveQueue(state: NameState, place: QueuePlace): void {
  const places = state.places;
  const index = places?.indexOf(place) ?? -1;
  if (!places || index < 0) return;
  places.splice(index, 1);
  if (places.length === 0) state.places = undefined;
  else tellPositions(state, index);
}

/** Tells each place from `from` on its position where it changed. */
function tellPositions(state: NameState, from = 0): void {
  const places = state.places ?? [];
  for (let index = from; index < places.length; index += 1) {
    const place = places[index]!;
    const position = index + 1;
    if (place.told === position) continue;
    place.told = position;
    place.tell?.(position);
  }
}

/** A waiter's place in the backend's queue, read again whenever it may have changed. */
export interface BackendPlace {
  /** Reads the place (once more after the read in flight, if one is) and tells a new one. */
  read(): void;
  /** The wait is over: nothing more is read or told. */
  stop(): void;
}

/**
 * The place of `driver`'s entry in the backend's queue (`QueueDriver.position`), told to `tell`
 * when it changes. Reads never overlap: a change during a read is read once after it, so the
 * last place told is the one read after the last change. A failed read tells nothing (the next
 * change reads again).
 */
export function backendPlace(
  position: NonNullable<QueueDriver['position']>,
  tell: (position: number) => void,
): BackendPlace {
  let told = 0;
  let reading = false;
  let again = false;
  let stopped = false;
  const moved = () => place.read();
  const place: BackendPlace = {
    read() {
      if (stopped) return;
      if (reading) {
        again = true;
        return;
      }
      reading = true;
      void (async () => {
        try {
          do {
            again = false;
            const read = await position(moved).catch(() => undefined);
            if (stopped || read === undefined || read < 1 || read === told) continue;
            told = read;
            tell(read);
          } while (again && !stopped);
        } finally {
          reading = false;
        }
      })();
    },
    stop() {
      stopped = true;
    },
  };
  return place;
}

/** What a service's waiter counts and places are counted across (`lock.get`'s `waitersScope`). */
export type WaitersScope = 'backend' | 'server';

/**
 * The backend's queue where waiters are counted and placed in it (`BackendQueue.count`): on a
 * backend that orders waiters across dlm servers and can count them. Otherwise undefined: each
 * service counts and places its own.
 */
export function backendQueueOf(backend: LockBackend): BackendQueue | undefined {
  const queue = backend.capabilities.fairQueue ? backend.queue : undefined;
  return queue?.count ? queue : undefined;
}
