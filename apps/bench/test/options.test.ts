import { UsageError } from '@dlm/flags';
import { describe, expect, it } from 'vitest';
import { parseOptions } from '../src/options.js';

describe('pnpm bench flags', () => {
  it('drops the leading -- that pnpm passes on, and keeps the defaults', () => {
    const options = parseOptions(['--', '--smoke', '--ttl-ms', '5000']);
    if ('help' in options || 'list' in options) throw new Error('expected options');
    expect(options.smoke).toBe(true);
    expect(options.ttlMs).toBe(5_000);
    expect(options.throughput.durationMs).toBe(1_000);
    expect(options.contention.holdMs).toBe(0);
    expect(parseOptions(['--help'])).toEqual({ help: true });
    expect(parseOptions(['--list'])).toEqual({ list: true });
  });

  it('takes plain milliseconds in -ms flags and says so when given a unit', () => {
    expect(() => parseOptions(['--duration-ms', '2s'])).toThrow(
      '--duration-ms must be a positive integer of milliseconds, got 2s',
    );
    expect(() => parseOptions(['--contenders', '1'])).toThrow(
      '--contenders must be an integer ≥ 2, got 1',
    );
    for (const argv of [['--bogus'], ['--workloads', 'nope'], ['--repeat', '0']]) {
      expect(() => parseOptions(argv), argv.join(' ')).toThrow(UsageError);
    }
  });
});
