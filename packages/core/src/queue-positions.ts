import type { NameState } from './name-state.js';

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
