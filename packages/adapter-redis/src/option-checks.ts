import { DlmError } from '@dlm/core';

/**
 * A whole-number option of at least `min` (its default when absent), else INVALID_PARAMS naming
 * it in its unit: `fenceRetentionMs must be a whole number of ms ≥ 1`.
 */
export function wholeOption(
  field: string,
  value: number | undefined,
  fallback: number,
  min: number,
  unit = ' of ms',
): number {
  const whole = value ?? fallback;
  if (!Number.isSafeInteger(whole) || whole < min) {
    throw new DlmError('INVALID_PARAMS', `${field} must be a whole number${unit} ≥ ${min}`, {
      field,
    });
  }
  return whole;
}
