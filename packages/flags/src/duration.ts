import { UsageError } from './usage-error.js';

const UNITS_MS: Readonly<Record<string, number>> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 };

/**
 * Parses a duration flag: a number with a unit, `500ms`, `30s`, `5m`, `1h`, or several in a
 * row (`1m30s`); `0` alone means zero. Returns whole milliseconds.
 *
 * A bare number is refused rather than guessed: one tool used to read `30` as seconds and
 * another refused it, so no reading of it is safe. A flag whose name carries the unit
 * (`--ttl-ms`) takes a plain integer instead: use `parseInteger` for it.
 *
 * @throws UsageError naming `flag` and the units.
 * @example parseDuration('1m30s', '--ttl') // 90_000
 */
export function parseDuration(text: string, flag: string): number {
  const value = text.trim();
  if (value === '0') return 0;
  if (/^\d+(?:\.\d+)?$/.test(value)) {
    throw new UsageError(
      `${flag} must be a duration with a unit (ms, s, m or h), like ${value}s or ${value}ms, got ${JSON.stringify(text)}`,
    );
  }
  const part = /(\d+(?:\.\d+)?)(ms|s|m|h)/gy;
  let total = 0;
  let consumed = 0;
  for (let match = part.exec(value); match; match = part.exec(value)) {
    total += Number(match[1]) * UNITS_MS[match[2]!]!;
    consumed = part.lastIndex;
  }
  if (consumed === 0 || consumed !== value.length) {
    throw new UsageError(
      `${flag} must be a duration like 500ms, 30s, 5m or 1h, got ${JSON.stringify(text)}`,
    );
  }
  return Math.round(total);
}

/** `1.2s`, `45s`, `3m05s`, `2h10m`: short and readable, for people. */
export function formatDuration(ms: number): string {
  if (ms < 1_000) return `${Math.max(0, Math.round(ms))}ms`;
  if (ms < 10_000) return `${(ms / 1_000).toFixed(1)}s`;
  const seconds = Math.round(ms / 1_000);
  if (seconds < 60) return `${seconds}s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes}m${String(seconds % 60).padStart(2, '0')}s`;
  return `${Math.floor(minutes / 60)}h${String(minutes % 60).padStart(2, '0')}m`;
}

/**
 * A bound as the user would type it: `100ms`, `30s`, `5m`, `24h` (exact, in the largest unit),
 * so an error about a duration flag speaks in the flag's own grammar.
 */
export function formatBound(ms: number): string {
  if (ms === 0) return '0';
  for (const [unit, size] of [
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1_000],
  ] as const) {
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}
