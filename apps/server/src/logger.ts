/** Structured log lines (one JSON object per line on stderr). */
export interface Logger {
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

const LEVELS = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 } as const;
export type LogLevel = keyof typeof LEVELS;

export function isLogLevel(value: string): value is LogLevel {
  return Object.hasOwn(LEVELS, value);
}

export function createLogger(
  level: LogLevel = 'info',
  write = (line: string) => process.stderr.write(line),
): Logger {
  const threshold = LEVELS[level];
  const emit = (
    lvl: Exclude<LogLevel, 'silent'>,
    message: string,
    fields?: Record<string, unknown>,
  ) => {
    if (LEVELS[lvl] < threshold) return;
    write(
      `${JSON.stringify({ time: new Date().toISOString(), level: lvl, msg: message, ...fields })}\n`,
    );
  };
  return {
    debug: (message, fields) => emit('debug', message, fields),
    info: (message, fields) => emit('info', message, fields),
    warn: (message, fields) => emit('warn', message, fields),
    error: (message, fields) => emit('error', message, fields),
  };
}
