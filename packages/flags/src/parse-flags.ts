import { type ParseArgsConfig, parseArgs } from 'node:util';
import { UsageError } from './usage-error.js';

/** The flag table `parseFlags` takes: `node:util` parseArgs's `options`. */
export type FlagOptions = NonNullable<ParseArgsConfig['options']>;

/** What `parseFlags` returns: parseArgs's typed `values` and `positionals`. */
export type ParsedFlags<O extends FlagOptions, P extends boolean> = ReturnType<
  typeof parseArgs<{ options: O; strict: true; allowPositionals: P }>
>;

/**
 * `argv` without a leading `--`. `pnpm start -- --memory` (pnpm ≥ 9) hands the program its `--`:
 * a leading one only ends pnpm's own options, it is no argument of the program's.
 */
export function withoutLeadingSeparator(argv: readonly string[]): string[] {
  return argv[0] === '--' ? argv.slice(1) : [...argv];
}

/** `-h`/`--help`, which every command takes: print its usage and exit 0. */
export const HELP_FLAG = { help: { type: 'boolean', short: 'h' } } as const;

/**
 * Flags of one type, by name, for a flag table: `flagsOf('string', 'host', 'port')` is
 * `{ host: { type: 'string' }, port: { type: 'string' } }`.
 */
export function flagsOf<const Name extends string, Type extends 'string' | 'boolean'>(
  type: Type,
  ...names: Name[]
): { [N in Name]: { type: Type } } {
  return Object.fromEntries(names.map((name) => [name, { type }])) as {
    [N in Name]: { type: Type };
  };
}

/**
 * `node:util` parseArgs, strict, with its errors turned into `UsageError`s.
 *
 * A leading `--` is dropped (see `withoutLeadingSeparator`), except where positionals are
 * allowed: there `--` keeps its usual meaning, the end of the flags (`dlm get -- -odd-name`).
 *
 * @example
 * const { values } = parseFlags(process.argv.slice(2), { port: { type: 'string' } });
 */
export function parseFlags<O extends FlagOptions, P extends boolean = false>(
  argv: readonly string[],
  options: O,
  { allowPositionals }: { allowPositionals?: P } = {},
): ParsedFlags<O, P> {
  const args = allowPositionals ? [...argv] : withoutLeadingSeparator(argv);
  try {
    return parseArgs({
      args,
      options,
      strict: true,
      allowPositionals: (allowPositionals ?? false) as P,
    });
  } catch (error) {
    throw new UsageError(inShort(error as Error & { code?: string }), { cause: error });
  }
}

/**
 * parseArgs's errors in a few words: its own are long and name its internals ("To specify a
 * positional argument starting with a '-', place it at the end of the command after '--'").
 */
function inShort(error: Error & { code?: string }): string {
  const quoted = /'([^']*)'/.exec(error.message)?.[1];
  if (quoted === undefined) return error.message;
  switch (error.code) {
    case 'ERR_PARSE_ARGS_UNKNOWN_OPTION':
      return `unknown option ${quoted}`;
    case 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL':
      return `unexpected argument ${quoted}`;
    case 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE':
      // "Option '--ttl <value>' argument missing" and "Option '--memory' does not take an argument"
      return / argument missing$/.test(error.message)
        ? `${quoted.replace(/ <value>$/, '')} needs a value`
        : `${quoted.split(' ')[0]} takes no value`;
    default:
      return error.message;
  }
}
