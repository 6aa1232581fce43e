import { describe, expect, it } from 'vitest';
import { formatDuration, parseDuration } from '../src/duration.js';

describe('durations', () => {
  it('parses 500ms, 30s, 5m, 1h, compounds and a bare 0', () => {
    expect(parseDuration('500ms', 'x')).toBe(500);
    expect(parseDuration('30s', 'x')).toBe(30_000);
    expect(parseDuration('5m', 'x')).toBe(300_000);
    expect(parseDuration('1h', 'x')).toBe(3_600_000);
    expect(parseDuration('1m30s', 'x')).toBe(90_000);
    expect(parseDuration('1.5s', 'x')).toBe(1_500);
    expect(parseDuration('0', 'x')).toBe(0);
  });

  it('rejects anything else, naming the flag', () => {
    for (const bad of ['', '30', 's', '5 m', '-1s', '1d', '10s garbage', '1e3ms']) {
      expect(() => parseDuration(bad, '--ttl'), bad).toThrow(/--ttl must be a duration/);
    }
  });

  it('formats for people', () => {
    expect(formatDuration(250)).toBe('250ms');
    expect(formatDuration(1_234)).toBe('1.2s');
    expect(formatDuration(45_000)).toBe('45s');
    expect(formatDuration(185_000)).toBe('3m05s');
    expect(formatDuration(7_800_000)).toBe('2h10m');
  });
});
