/**
 * A bad flag, argument or environment value: the program prints the message with its usage
 * and exits 2. Every dlm program (server, CLI, bench, fault harness) throws this one class, so
 * `dlm serve` and `dlm-server` report a bad flag the same way.
 */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}
