import { type ParseArgsConfig, parseArgs } from 'node:util';
import { CONNECTION_FLAGS } from './connection-options.js';
import { UsageError } from './usage-error.js';

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

type Options = NonNullable<ParseArgsConfig['options']>;

/** Flags every command takes. */
export const COMMON_OPTIONS = {
  ...CONNECTION_FLAGS,
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const satisfies Options;

/** `node:util` parseArgs, strict, with its errors turned into usage errors. */
export function parseFlags<O extends Options>(argv: string[], options: O) {
  try {
    return parseArgs({ args: argv, options, strict: true, allowPositionals: true });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
}
