import { type BackendCapabilities, type DlmError, isDlmError } from '@dlm/core';

let unique = 0;
/** Each test uses its own names, so suites never need to flush the backend. */
export function lockName(label: string): string {
  unique += 1;
  return `conformance/${label}/${process.pid}-${Date.now().toString(36)}-${unique}`;
}

/** The DlmError `promise` rejects with; anything else (or success) fails the test. */
export async function failure(promise: Promise<unknown>): Promise<DlmError> {
  try {
    await promise;
  } catch (error) {
    if (isDlmError(error)) return error;
    throw error;
  }
  throw new Error('expected the call to fail, but it succeeded');
}

/** The shortest lease worth testing expiry with, on this backend's granularity. */
export function shortTtl(caps: BackendCapabilities): number {
  const wanted = Math.max(caps.minTtlMs, 300);
  return Math.ceil(wanted / caps.ttlGranularityMs) * caps.ttlGranularityMs;
}

/** How long after a lease's end a backend may still need to notice it ended. */
export function expirySlack(caps: BackendCapabilities): number {
  return caps.ttlGranularityMs + 1_500;
}
