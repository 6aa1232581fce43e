export { formatBound, formatDuration, parseDuration } from './duration.js';
export { type IntegerFlag, integerFlag, parseInteger } from './integer.js';
export { readPackageVersion } from './package-version.js';
export {
  type FlagOptions,
  flagsOf,
  HELP_FLAG,
  type ParsedFlags,
  parseFlags,
  withoutLeadingSeparator,
} from './parse-flags.js';
export { UsageError, usageFailure } from './usage-error.js';
