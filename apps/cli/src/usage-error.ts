/** A bad flag or argument: printed with the command's usage; dlm exits 2. */
export class UsageError extends Error {}
