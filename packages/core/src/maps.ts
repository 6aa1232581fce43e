/** A map a lookup can fill: `Map` or `WeakMap`. */
interface FillableMap<K, V> {
  get(key: K): V | undefined;
  set(key: K, value: V): unknown;
}

/**
 * The value under `key`, made by `create` and stored first if there is none (what the proposed
 * `Map.prototype.getOrInsertComputed` does; Node 20 has no such method).
 *
 * @example
 * getOrCreate(listeners, name, () => new Set()).add(listener);
 */
export function getOrCreate<K, V>(map: FillableMap<K, V>, key: K, create: () => V): V {
  let value = map.get(key);
  if (value === undefined) {
    value = create();
    map.set(key, value);
  }
  return value;
}
