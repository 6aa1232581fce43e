import { UsageError } from './usage-error.js';

export interface IntegerFlag {
  /** The smallest value allowed (default 1). */
  min?: number;
  /** Said after the rule in the error, e.g. `0 = off`. */
  note?: string;
}

function rule(min: number): string {
  return min === 1
    ? 'a positive integer'
    : min === 0
      ? 'a non-negative integer'
      : `an integer ≥ ${min}`;
}

/**
 * Parses an integer flag: decimal digits only (no sign, exponent or hex), a safe integer,
 * at least `min`. A flag named for its unit (`--ttl-ms`, `--poll-ms`) says so in the error.
 *
 * @throws UsageError naming `flag`, the rule and what was given.
 * @example parseInteger('2000', '--ttl-ms') // 2000
 */
export function parseInteger(
  text: string,
  flag: string,
  { min = 1, note }: IntegerFlag = {},
): number {
  const value = Number(text);
  if (/^\d+$/.test(text) && Number.isSafeInteger(value) && value >= min) return value;
  const unit = flag.endsWith('-ms') ? ' of milliseconds' : '';
  const said = note ? ` (${note})` : '';
  throw new UsageError(`${flag} must be ${rule(min)}${unit}${said}, got ${text}`);
}

/** `parseInteger` of a flag that may be absent: `fallback` when it is. */
export function integerFlag(
  text: string | undefined,
  fallback: number,
  flag: string,
  options?: IntegerFlag,
): number {
  return text === undefined ? fallback : parseInteger(text, flag, options);
}
