import { type FlagOptions, HELP_FLAG, parseFlags, UsageError } from '@dlm/flags';
import { CONNECTION_FLAGS } from './connection-options.js';
import { EXIT } from './exit-codes.js';

/** One `dlm` subcommand. */
export interface Command {
  name: string;
  /** The command's `--help` text. */
  usage: string;
  /**
   * Runs with the arguments after the command name; resolves with the exit code, or with
   * undefined when the command keeps running on its own (the server).
   */
  run(argv: string[]): Promise<number | undefined>;
}

/** Flags every command takes. */
export const COMMON_OPTIONS = {
  ...CONNECTION_FLAGS,
  json: { type: 'boolean' },
  ...HELP_FLAG,
} as const satisfies FlagOptions;

/**
 * Parses a command's flags (`options` include `help`) and positionals. On `--help` it prints
 * `usage` and returns undefined: the command then exits with OK.
 */
export function parseCommandArgs<Options extends typeof COMMON_OPTIONS>(
  usage: string,
  argv: string[],
  options: Options,
) {
  const parsed = parseFlags(argv, options, { allowPositionals: true });
  if ((parsed.values as { help?: boolean }).help) {
    process.stdout.write(usage);
    return undefined;
  }
  return parsed;
}

/**
 * Parses the arguments of a command that takes exactly one lock NAME and its flags (the common
 * ones unless it names others). On `--help` it prints `usage` and returns undefined: the command
 * then exits with OK.
 */
export function parseNameArgs<Options extends typeof COMMON_OPTIONS = typeof COMMON_OPTIONS>(
  usage: string,
  argv: string[],
  options: Options = COMMON_OPTIONS as Options,
) {
  const parsed = parseCommandArgs(usage, argv, options);
  if (!parsed) return undefined;
  const { values, positionals } = parsed;
  if (positionals.length === 0) throw new UsageError('a lock NAME is missing');
  if (positionals.length > 1) {
    const names = positionals.map((name) => JSON.stringify(name)).join(' ');
    throw new UsageError(`one lock NAME at a time (got ${names})`);
  }
  return { values, name: positionals[0]! };
}

/** What {@link parseNameArgs} gives a command: its flags, and the lock NAME. */
export type NameArgs<Options extends typeof COMMON_OPTIONS = typeof COMMON_OPTIONS> = NonNullable<
  ReturnType<typeof parseNameArgs<Options>>
>;

/** A command that takes exactly one lock NAME and its flags (`--help`: usage, exit OK). */
export function nameCommand<Options extends typeof COMMON_OPTIONS = typeof COMMON_OPTIONS>(
  name: string,
  usage: string,
  run: (args: NameArgs<Options>) => Promise<number | undefined>,
  options: Options = COMMON_OPTIONS as Options,
): Command {
  return {
    name,
    usage,
    async run(argv) {
      const args = parseNameArgs(usage, argv, options);
      return args ? run(args) : EXIT.OK;
    },
  };
}
