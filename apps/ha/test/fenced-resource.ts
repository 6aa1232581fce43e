/**
 * What the locks protect in these scenarios: one in-test record per lock name of who is inside
 * and the highest token it accepted, as a fenced resource would keep. Every holder enters with
 * its token and leaves before releasing; two holders inside at once, or a token that does not
 * exceed every earlier one, is recorded as a violation.
 */
export interface FencedResource {
  enter(name: string, token: bigint, who: string): void;
  leave(name: string): void;
  readonly violations: string[];
  /** Entries accepted, per name. */
  readonly entries: Map<string, number>;
}

export function fencedResource(): FencedResource {
  const inside = new Map<string, string>();
  const highest = new Map<string, bigint>();
  const violations: string[] = [];
  const entries = new Map<string, number>();
  return {
    violations,
    entries,
    enter(name, token, who) {
      const current = inside.get(name);
      if (current !== undefined)
        violations.push(`${name}: ${who} entered while ${current} was inside`);
      const last = highest.get(name) ?? 0n;
      if (token <= last) violations.push(`${name}: token ${token} after ${last} (${who})`);
      else highest.set(name, token);
      inside.set(name, who);
      entries.set(name, (entries.get(name) ?? 0) + 1);
    },
    leave(name) {
      inside.delete(name);
    },
  };
}
