/**
 * What `dlm` exits with. `dlm lock` otherwise exits with its command's own status (128 + the
 * signal number when the command was killed by a signal, as shells report it), so its own
 * codes sit at the top of the range, next to the 126/127 that shells use for a command that
 * cannot run.
 */
export const EXIT = {
  OK: 0,
  /** get, ls, watch: the server could not be reached or refused the request. */
  FAILURE: 1,
  /** check: the token does not hold the lock now. */
  NOT_CURRENT: 1,
  /** A bad flag or argument (nothing was run). */
  USAGE: 2,
  /** lock: the lock was lost (expired, revoked, or not renewable) while the command ran; the command was stopped. */
  LOCK_LOST: 123,
  /** lock: `--wait` ran out while another owner held the lock; the command did not run. */
  WAIT_TIMEOUT: 124,
  /** lock: dlm itself failed (server unreachable, refused, lost reply); the command did not run. check: the server could not answer. */
  DLM_ERROR: 125,
  /** lock: the command was found but could not be executed. */
  NOT_EXECUTABLE: 126,
  /** lock: the command was not found. */
  NOT_FOUND: 127,
} as const;
