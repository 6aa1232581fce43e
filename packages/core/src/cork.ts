/** A writable that can hold its writes: a Node `net.Socket` or `stream.Writable`. */
export interface Corkable {
  cork(): void;
  uncork(): void;
}

const held = new WeakSet<Corkable>();

/**
 * Holds `stream`'s writes until `flush` calls back, so that what is written meanwhile leaves
 * in one system call instead of one each. `flush` is the moment to let go: `process.nextTick`
 * (after the current turn's promise jobs) or `setImmediate` (after every I/O callback of the
 * loop iteration, e.g. every frame read in it). A stream already held by this is left as it is.
 *
 * @example
 * corkUntil(socket, process.nextTick); // the replies of this turn go out together
 */
export function corkUntil(stream: Corkable, flush: (uncork: () => void) => void): void {
  if (held.has(stream)) return;
  held.add(stream);
  stream.cork();
  flush(() => {
    held.delete(stream);
    stream.uncork();
  });
}
