import { DlmError, isDlmError, type Limits, validateName } from '@dlm/core';

/**
 * A lock-name prefix for listing and watching: the empty string (everything) or anything that
 * would be a valid name. Checked by core's name validation, the only one; errors name `prefix`.
 */
export function validatePrefix(value: unknown, limits: Limits): string {
  if (value === '' || value === undefined) return '';
  try {
    return validateName(value, limits);
  } catch (error) {
    if (!isDlmError(error, 'INVALID_PARAMS')) throw error;
    throw new DlmError('INVALID_PARAMS', error.message.replace(/^name\b/, 'prefix'), {
      field: 'prefix',
    });
  }
}
