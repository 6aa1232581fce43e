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

  it('runs workloads 6 and 7 with 16 clients, briefly in smoke, as asked otherwise', () => {
    const smoke = parseOptions(['--smoke']);
    const full = parseOptions(['--shared-clients', '8', '--duration-ms', '1500']);
    if ('help' in smoke || 'list' in smoke || 'help' in full || 'list' in full) {
      throw new Error('expected options');
    }
    expect(smoke.workloads).toContain('semaphore');
    expect(smoke.workloads).toContain('read-write');
    expect(smoke.sharedModes).toMatchObject({ clients: 16, durationMs: 300, warmupMs: 50 });
    expect(full.sharedModes).toMatchObject({ clients: 8, durationMs: 1_500, warmupMs: 500 });
    expect(() => parseOptions(['--shared-clients', '1'])).toThrow(UsageError);
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
