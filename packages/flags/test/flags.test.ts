import { describe, expect, it } from 'vitest';
import {
  flagsOf,
  formatBound,
  formatDuration,
  integerFlag,
  parseDuration,
  parseFlags,
  parseInteger,
  UsageError,
  usageFailure,
  withoutLeadingSeparator,
} from '../src/index.js';

describe('parseDuration', () => {
  it('parses 500ms, 30s, 5m, 1h, compounds, fractions and a bare 0', () => {
    expect(parseDuration('500ms', 'x')).toBe(500);
    expect(parseDuration('30s', 'x')).toBe(30_000);
    expect(parseDuration('5m', 'x')).toBe(300_000);
    expect(parseDuration('1h', 'x')).toBe(3_600_000);
    expect(parseDuration('1m30s', 'x')).toBe(90_000);
    expect(parseDuration('1.5s', 'x')).toBe(1_500);
    expect(parseDuration(' 2s ', 'x')).toBe(2_000);
    expect(parseDuration('0', 'x')).toBe(0);
  });

  it('refuses a bare number, naming the flag and the units', () => {
    for (const bare of ['30', '1.5', '00']) {
      expect(() => parseDuration(bare, '--duration'), bare).toThrow(UsageError);
      expect(() => parseDuration(bare, '--duration'), bare).toThrow(
        `--duration must be a duration with a unit (ms, s, m or h), like ${bare}s or ${bare}ms, got "${bare}"`,
      );
    }
  });

  it('refuses anything else, naming the flag', () => {
    for (const bad of ['', 's', '5 m', '-1s', '1d', '10s garbage', '1e3ms']) {
      expect(() => parseDuration(bad, '--ttl'), bad).toThrow(/^--ttl must be a duration like/);
    }
  });
});

describe('formatDuration and formatBound', () => {
  it('formats for people', () => {
    expect(formatDuration(250)).toBe('250ms');
    expect(formatDuration(1_234)).toBe('1.2s');
    expect(formatDuration(45_000)).toBe('45s');
    expect(formatDuration(185_000)).toBe('3m05s');
    expect(formatDuration(7_800_000)).toBe('2h10m');
  });

  it('writes a bound in the grammar parseDuration reads', () => {
    for (const ms of [0, 100, 1_500, 30_000, 300_000, 86_400_000]) {
      expect(parseDuration(formatBound(ms), 'x')).toBe(ms);
    }
    expect(formatBound(300_000)).toBe('5m');
    expect(formatBound(1_500)).toBe('1500ms');
  });
});

describe('parseInteger', () => {
  it('takes decimal digits at or above the minimum', () => {
    expect(parseInteger('2000', '--ttl-ms')).toBe(2_000);
    expect(parseInteger('0', '--hold-ms', { min: 0 })).toBe(0);
    expect(integerFlag(undefined, 7, '--workers')).toBe(7);
    expect(integerFlag('3', 7, '--workers')).toBe(3);
  });

  it('refuses signs, fractions, exponents, units and values below the minimum, in the flag’s unit', () => {
    for (const bad of ['', '-1', '+1', '1.5', '1e3', '0x10', '2s', ' 5']) {
      expect(() => parseInteger(bad, '--workers'), bad).toThrow(
        `--workers must be a positive integer, got ${bad}`,
      );
    }
    expect(() => parseInteger('2s', '--ttl-ms')).toThrow(
      '--ttl-ms must be a positive integer of milliseconds, got 2s',
    );
    expect(() => parseInteger('1', '--contenders', { min: 2 })).toThrow(
      '--contenders must be an integer ≥ 2, got 1',
    );
    expect(() => parseInteger('x', '--sweep-ms', { min: 0, note: '0 = off' })).toThrow(
      '--sweep-ms must be a non-negative integer of milliseconds (0 = off), got x',
    );
  });
});

describe('parseFlags', () => {
  const options = { port: { type: 'string' }, memory: { type: 'boolean' } } as const;

  it('drops a leading -- (pnpm passes it on)', () => {
    expect(withoutLeadingSeparator(['--', '--memory'])).toEqual(['--memory']);
    expect(parseFlags(['--', '--port', '1', '--memory'], options).values).toEqual({
      port: '1',
      memory: true,
    });
  });

  it('keeps -- as the end of the flags where positionals are allowed', () => {
    const { values, positionals } = parseFlags(['--memory', '--', '--port'], options, {
      allowPositionals: true,
    });
    expect(values).toEqual({ memory: true });
    expect(positionals).toEqual(['--port']);
  });

  it('turns parseArgs errors into usage errors, in a few words', () => {
    expect(() => parseFlags(['--nope'], options)).toThrow(UsageError);
    expect(() => parseFlags(['--nope'], options)).toThrow(/^unknown option --nope$/);
    expect(() => parseFlags(['name'], options)).toThrow(/^unexpected argument name$/);
    expect(() => parseFlags(['--port'], options)).toThrow(/^--port needs a value$/);
    expect(() => parseFlags(['--memory=yes'], options)).toThrow(/^--memory takes no value$/);
  });

  it('usageFailure says the reason and where the help is, on two lines', () => {
    expect(usageFailure('dlm get', new UsageError('a lock NAME is missing'))).toBe(
      "dlm get: a lock NAME is missing\nRun 'dlm get --help' for its usage.\n",
    );
  });
});

describe('flagsOf', () => {
  it('makes a flag table of one type that parseFlags reads', () => {
    const table = { ...flagsOf('string', 'host', 'port'), ...flagsOf('boolean', 'memory') };
    expect(table).toEqual({
      host: { type: 'string' },
      port: { type: 'string' },
      memory: { type: 'boolean' },
    });
    const { values } = parseFlags(['--host', 'h', '--memory'], table);
    expect(values).toEqual({ host: 'h', memory: true });
    expect(() => parseFlags(['--memory', 'x', '--port'], table)).toThrow(UsageError);
  });
});
