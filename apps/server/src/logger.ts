import { type DestinationStream, pino } from 'pino';

/**
 * Structured log lines: one JSON object per line on stderr, written by pino. The interface is
 * small on purpose so that an embedding application can pass its own logger (or a pino child
 * through `pinoLogger`).
 */
export interface Logger {
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
  /**
   * Whether `level` would be written. Lets hot paths skip building fields for a debug line
   * that nobody reads; a logger without it is asked to write every line.
   */
  isLevelEnabled?(level: Exclude<LogLevel, 'silent'>): boolean;
}

const LEVELS = ['debug', 'info', 'warn', 'error', 'silent'] as const;
export type LogLevel = (typeof LEVELS)[number];

export function isLogLevel(value: string): value is LogLevel {
  return (LEVELS as readonly string[]).includes(value);
}

/** Adapts a pino logger (or child) to `Logger`. */
export function pinoLogger(base: pino.Logger): Logger {
  return {
    debug: (message, fields) => base.debug(fields ?? {}, message),
    info: (message, fields) => base.info(fields ?? {}, message),
    warn: (message, fields) => base.warn(fields ?? {}, message),
    error: (message, fields) => base.error(fields ?? {}, message),
    isLevelEnabled: (level) => base.isLevelEnabled(level),
  };
}

/**
 * A JSON logger at `level`, writing `{"level":"info","time":"…","pid":…,"msg":"…",…fields}`
 * lines to stderr, or to `write` (tests capture lines with it).
 */
export function createLogger(level: LogLevel = 'info', write?: (line: string) => void): Logger {
  const destination: DestinationStream = write
    ? { write }
    : // Synchronous, so that the lines written just before process.exit() are not lost.
      pino.destination({ fd: 2, sync: true });
  return pinoLogger(
    pino(
      {
        level,
        base: { pid: process.pid },
        timestamp: pino.stdTimeFunctions.isoTime,
        formatters: { level: (label) => ({ level: label }) },
      },
      destination,
    ),
  );
}
