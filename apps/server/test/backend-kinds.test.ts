import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  BACKEND_KIND_NAMES,
  BACKEND_KINDS,
  type BackendConfig,
  backendArgs,
  ConfigError,
  parseConfig,
  USAGE,
} from '../src/index.js';

/** A value each flag accepts, so that only its owner decides whether it is refused. */
const SAMPLE: Readonly<Record<string, string>> = {
  'data-dir': '/tmp/dlm',
  'redis-url': 'redis://127.0.0.1:1',
  'redis-cluster': '127.0.0.1:1',
  'redis-sentinels': '127.0.0.1:1',
  'redis-sentinel-name': 'main',
  'redis-min-replicas': '1',
  'redis-replica-timeout-ms': '100',
  'redlock-urls': 'redis://127.0.0.1:1',
  'etcd-endpoints': 'http://127.0.0.1:1',
  'zk-connect': '127.0.0.1:1',
  'postgres-url': 'postgres://x',
};

/** One config of each kind (and each Redis deployment) that its flags can give. */
const CONFIGS: BackendConfig[] = [
  { kind: 'embedded', dataDir: null },
  { kind: 'embedded', dataDir: '/var/lib/dlm' },
  { kind: 'redis', url: 'redis://127.0.0.1:6390', durable: false },
  { kind: 'redis', url: 'redis://127.0.0.1:6390', durable: true, minReplicas: 1 },
  { kind: 'redis', cluster: ['127.0.0.1:7000', '127.0.0.1:7001'], durable: false },
  {
    kind: 'redis',
    sentinels: ['127.0.0.1:26379'],
    sentinelName: 'main',
    url: 'redis://:pw@x/2',
    durable: false,
    replicaTimeoutMs: 250,
  },
  { kind: 'redlock', urls: ['redis://a:1', 'redis://b:2', 'redis://c:3'] },
  { kind: 'etcd', endpoints: ['http://127.0.0.1:2379', 'http://127.0.0.1:2380'] },
  { kind: 'zookeeper', connect: '127.0.0.1:2181,127.0.0.1:2182' },
  { kind: 'postgres', url: 'postgres://dlm@127.0.0.1:5432/dlm' },
  { kind: 'postgres', url: 'postgresql://x@h/db' },
];

/** The same settings as variables: `--redis-url U` as DLM_REDIS_URL=U, `--memory` as DLM_MEMORY=1. */
function variablesOf(args: string[]): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (let i = 0; i < args.length; i++) {
    const name = args[i]!.slice(2);
    const value = args[i + 1];
    const variable = `DLM_${name.toUpperCase().replaceAll('-', '_')}`;
    if (value === undefined || value.startsWith('--')) env[variable] = '1';
    else env[variable] = args[++i];
  }
  return env;
}

describe('the registry of backend kinds', () => {
  it('refuses every flag of a kind with every other kind, postgres among them', () => {
    const flags = BACKEND_KINDS.flatMap((owner) =>
      Object.entries(owner.flags).map(([name, type]) => ({ owner: owner.kind, name, type })),
    );
    expect(flags.map((flag) => flag.name)).toContain('postgres-url');
    for (const kind of BACKEND_KIND_NAMES) {
      for (const { owner, name, type } of flags.filter((flag) => flag.owner !== kind)) {
        const args = [
          '--backend',
          kind,
          `--${name}`,
          ...(type === 'string' ? [SAMPLE[name]!] : []),
        ];
        expect(() => parseConfig(args, {}), args.join(' ')).toThrow(ConfigError);
        expect(() => parseConfig(args, {}), args.join(' ')).toThrow(
          `--${name} is for --backend ${owner}, but the backend is ${kind}`,
        );
      }
    }
  });

  it('reads back as the same config the flags bench and faults start a server with', () => {
    for (const config of CONFIGS) {
      expect(parseConfig(backendArgs(config), {})?.backend, JSON.stringify(config)).toEqual({
        durable: config.kind === 'redis' ? false : undefined,
        ...config,
      });
    }
  });

  it('reads each setting from its variable as from its flag', () => {
    for (const config of CONFIGS) {
      const env = variablesOf(backendArgs(config));
      expect(parseConfig([], env)?.backend, JSON.stringify(env)).toEqual(
        parseConfig(backendArgs(config), {})?.backend,
      );
    }
  });

  it('a flag wins over its variable; a boolean variable is on at 1 or true only', () => {
    const postgres = ['--backend', 'postgres', '--postgres-url', 'postgres://dlm@h/dlm'];
    expect(parseConfig(postgres, { DLM_POSTGRES_URL: 'postgres://other@h/db' })?.backend).toEqual({
      kind: 'postgres',
      url: 'postgres://dlm@h/dlm',
    });
    const redis = ['--backend', 'redis', '--redis-url', 'redis://127.0.0.1:6390'];
    expect(parseConfig(redis, { DLM_REDIS_URL: 'redis://other:1' })?.backend).toMatchObject({
      url: 'redis://127.0.0.1:6390',
    });
    for (const [value, durable] of [
      ['1', true],
      ['true', true],
      ['0', false],
      ['yes', false],
    ]) {
      expect(parseConfig(redis, { DLM_REDIS_DURABLE: value as string })?.backend).toMatchObject({
        durable,
      });
    }
  });

  it('names every kind, flag and variable in the help text and the README', () => {
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    expect(USAGE).toContain(`--backend KIND           ${BACKEND_KIND_NAMES.join(' | ')}`);
    for (const entry of BACKEND_KINDS) {
      expect(USAGE).toContain(entry.help);
      expect(readme).toContain(`\`${entry.kind}\``);
      for (const name of Object.keys(entry.flags)) {
        const variable = `DLM_${name.toUpperCase().replaceAll('-', '_')}`;
        expect(entry.help).toContain(`--${name}`);
        expect(entry.help).toContain(variable);
        expect(readme).toContain(`\`--${name}`);
        expect(readme).toContain(`\`${variable}`);
      }
    }
  });
});
