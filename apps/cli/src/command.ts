import type { FlagOptions } from '@dlm/flags';
import { CONNECTION_FLAGS } from './connection-options.js';

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
  help: { type: 'boolean', short: 'h' },
} as const satisfies FlagOptions;
