import type { DlmClient } from '@dlm/client';

/** How long a first connection may take before the user is told what dlm is waiting for. */
export const WAITING_NOTICE_MS = 1_000;

/** The reason in a connection error's message, without the URL it begins with. */
function reasonOf(error: Error): string {
  const match = /^(?:connection to|cannot open|no session with) \S+(?: failed)?: (.*)$/s.exec(
    error.message,
  );
  // The short reason only (`connection refused`): the raw error text follows in the final
  // error if the command gives up.
  return (match ? match[1]! : error.message).replace(/ \(.*\)$/s, '');
}

/**
 * Says once on stderr what the command waits for when its first session takes longer than a
 * second: `dlm: waiting for ws://… (connection refused), retrying` after a failed attempt, or
 * `(no answer yet)` while the first one hangs. Without it, a server that is down looks like a hang until the request times out.
 * Returns the function that stops watching (call it once connected or done).
 */
export function noticeWaiting(client: DlmClient, url: string): () => void {
  let lastError: Error | undefined;
  let told = false;
  const offError = client.on('error', (error) => {
    lastError = error;
  });
  const timer = setTimeout(() => {
    if (client.session || told) return;
    told = true;
    // No error yet: the connection attempt itself hangs (a blackholed address, a stuck server).
    process.stderr.write(
      lastError
        ? `dlm: waiting for ${url} (${reasonOf(lastError)}), retrying\n`
        : `dlm: waiting for ${url} (no answer yet)\n`,
    );
  }, WAITING_NOTICE_MS);
  timer.unref();
  const stop = () => {
    clearTimeout(timer);
    offError();
    offConnected();
  };
  const offConnected = client.on('connected', stop);
  return stop;
}
