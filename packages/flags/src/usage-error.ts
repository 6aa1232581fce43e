/**
 * A bad flag, argument or environment value: the program prints `usageFailure`'s lines and
 * exits 2. Every dlm program (server, CLI, bench, fault harness) throws this one class, so
 * `dlm serve` and `dlm-server` report a bad flag the same way.
 */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/**
 * What a program prints on stderr for a usage error: the reason, and where the help is. Not the
 * whole help: a screen of options after it buried the one line that said what was wrong.
 *
 * @example usageFailure('dlm lock', error) // "dlm lock: a lock NAME is missing\nRun 'dlm lock --help' for its usage.\n"
 */
export function usageFailure(command: string, error: UsageError): string {
  return `${command}: ${error.message}\nRun '${command} --help' for its usage.\n`;
}
