import { UsageError } from '@dlm/flags';
import { describe, expect, it } from 'vitest';
import { parseFaultsArgs } from '../src/options.js';

function campaign(argv: string[]) {
  const command = parseFaultsArgs(argv);
  if (command.kind !== 'campaign') throw new Error(`not a campaign: ${command.kind}`);
  return command;
}

describe('dlm-faults flags', () => {
  it('reads durations in the one grammar, with per-backend overrides', () => {
    const { campaign: options } = campaign([
      '--',
      '--backend',
      'embedded,etcd',
      '--duration',
      '1m30s,etcd=500ms',
      '--lin-duration',
      '2s',
    ]);
    expect(options.backends).toEqual(['embedded', 'etcd']);
    expect(options.durationMs).toBe(90_000);
    expect(options.durationsMs).toEqual({ etcd: 500 });
    expect(options.lockDurationMs).toBe(2_000);
    const lin = campaign(['--lin-duration', '6s,postgres=20s', '--short']).campaign;
    expect(lin.lockDurationMs).toBe(6_000);
    expect(lin.lockDurationsMs).toEqual({ postgres: 20_000 });
    expect(() => campaign(['--lin-duration', 'mysql=2s'])).toThrow(
      /unknown backend "mysql" in --lin-duration/,
    );
  });

  it('keeps its defaults: 30s (15s short), 6s per linearizability segment, 2000 ms TTL', () => {
    expect(campaign([]).campaign).toMatchObject({
      durationMs: 30_000,
      lockDurationMs: 6_000,
      ttlMs: 2_000,
      workers: 3,
      meddlers: 1,
      keys: 2,
      negativeControl: false,
      lockConnections: 8,
      lockNames: 3,
      lockThinkMs: 10,
      linNegativeControl: false,
      lanes: 1,
      lockDelayControl: false,
      holdCapControl: false,
    });
    const short = campaign(['--short']);
    expect(short.campaign).toMatchObject({
      lanes: 3,
      durationMs: 15_000,
      negativeControl: true,
      linNegativeControl: true,
      lockDelayControl: true,
      holdCapControl: true,
      lockDurationMs: 6_000,
      lockDurationsMs: { postgres: 15_000 },
    });
    expect(short.campaign.lockNemeses?.('etcd')).toEqual(['server-kill']);
    expect(short.campaign.nemeses('etcd')).toEqual(['leader-kill']);
    expect(short.campaign.nemeses('redis-sentinel-wait')).toEqual(['master-kill']);
    expect(short.campaign.backends).toContain('redis-sentinel-wait');
    expect(short.campaign.backends).not.toContain('redis-sentinel');
    expect(campaign([]).campaign.backends).toContain('redis-sentinel');
    expect(campaign(['--meddlers', '0']).campaign.meddlers).toBe(0);
    expect(campaign(['--short', '--lanes', '1']).campaign.lanes).toBe(1);
    expect(() => campaign(['--lanes', '0'])).toThrow(/--lanes/);
  });

  it('plans shared-mode segments: none by default, the first short nemesis with --short', () => {
    expect(campaign([]).campaign.sharedNemeses?.('etcd')).toEqual([]);
    const short = campaign(['--short']).campaign;
    expect(short.sharedNemeses?.('etcd')).toEqual(['leader-kill']);
    expect(short.sharedNemeses?.('embedded')).toEqual(['client-pause']);
    expect(short.sharedNemeses?.('redlock')).toEqual([]);
    expect(short.sharedDurationMs).toBe(6_000);
    // `--shared` alone runs only shared-mode segments.
    const only = campaign(['--shared', 'client-kill,server-kill', '--shared-duration', '3s']);
    expect(only.campaign.sharedNemeses?.('redis')).toEqual(['client-kill', 'server-kill']);
    expect(only.campaign.nemeses('redis')).toEqual([]);
    expect(only.campaign.sharedDurationMs).toBe(3_000);
    expect(() => parseFaultsArgs(['--shared', 'nope'])).toThrow(UsageError);
  });

  it('refuses a bare number as a duration, naming the units (it used to mean seconds)', () => {
    expect(() => parseFaultsArgs(['--duration', '30'])).toThrow(
      '--duration must be a duration with a unit (ms, s, m or h), like 30s or 30ms, got "30"',
    );
    expect(() => parseFaultsArgs(['--duration', '30s,etcd=60'])).toThrow(
      '--duration (for etcd) must be a duration with a unit',
    );
    expect(() => parseFaultsArgs(['--lin-duration', '6'])).toThrow(/^--lin-duration must be/);
  });

  it('takes a plain number of milliseconds where the flag says -ms, and says so when not', () => {
    expect(campaign(['--ttl-ms', '3000', '--l1-bound-ms', '2500']).campaign).toMatchObject({
      ttlMs: 3_000,
      l1BoundMs: 2_500,
    });
    expect(() => parseFaultsArgs(['--ttl-ms', '2s'])).toThrow(
      '--ttl-ms must be a positive integer of milliseconds, got 2s',
    );
  });

  it('throws UsageError for unknown flags, backends and nemeses', () => {
    for (const argv of [
      ['--bogus'],
      ['--backend', 'mysql'],
      ['--nemesis', 'meteor'],
      ['--lin', 'client-pause'],
      ['--duration', 'mysql=30s'],
      ['--workers', '0'],
    ]) {
      expect(() => parseFaultsArgs(argv), argv.join(' ')).toThrow(UsageError);
    }
  });

  it('has --help and --merge modes', () => {
    expect(parseFaultsArgs(['-h'])).toEqual({ kind: 'help' });
    expect(parseFaultsArgs(['--merge', 'a.json,b.json', '--label', 'x'])).toMatchObject({
      kind: 'merge',
      files: ['a.json', 'b.json'],
      label: 'x',
    });
  });
});
