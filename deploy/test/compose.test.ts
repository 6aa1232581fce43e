import { existsSync, readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { hashToken, newToken, parseConfig, type ServerConfig } from '@dlm/server';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';

/**
 * deploy/compose/compose.yaml is not run here (no Docker Compose on the CI machine, no images to
 * pull): it is checked against what it must agree with — the Dockerfile (its ENV, EXPOSE and
 * HEALTHCHECK), deploy/haproxy/haproxy.cfg (the variables it reads and its server lines) and the
 * server's own configuration parser (the environment the servers get).
 */
const COMPOSE = fileURLToPath(new URL('../compose/compose.yaml', import.meta.url));
const DOCKERFILE = fileURLToPath(new URL('../../Dockerfile', import.meta.url));
const HAPROXY = fileURLToPath(new URL('../haproxy/haproxy.cfg', import.meta.url));

type Doc = Record<string, any>;

// A copy: the servers share one anchored mapping, which a breakage below must not change for all.
const compose = (): Doc =>
  structuredClone(parse(readFileSync(COMPOSE, 'utf8'), { merge: true })) as Doc;
const dockerfile = readFileSync(DOCKERFILE, 'utf8');
/** haproxy.cfg without its comments. */
const haproxyCfg = readFileSync(HAPROXY, 'utf8')
  .split('\n')
  .filter((line) => !line.trim().startsWith('#'))
  .join('\n');

/** The runtime stage's `ENV a=b c=d` (the last stage: after the last FROM). */
function imageEnv(text: string): Record<string, string> {
  const runtime = text.slice(text.lastIndexOf('\nFROM '));
  const env: Record<string, string> = {};
  for (const line of runtime.split('\n').filter((l) => l.startsWith('ENV '))) {
    for (const pair of line.slice(4).trim().split(/\s+/)) {
      const [name, value] = pair.split('=') as [string, string];
      env[name] = value;
    }
  }
  return env;
}

/**
 * A compose `${NAME}`, `${NAME:-default}` or `${NAME:?message}` as the value it takes with
 * `vars` (compose itself refuses to start when a `:?` one is unset: here it reads as empty).
 */
function interpolate(value: string, vars: Record<string, string>): string {
  return value.replace(
    /\$\{(\w+)(?::([-?])([^}]*))?\}/g,
    (_, name: string, how?: string, fallback = '') => vars[name] ?? (how === '-' ? fallback : ''),
  );
}

/** `--flag=value` of an etcd member's command. */
const flagOf = (service: Doc, flag: string): string | undefined =>
  (service.command as string[] | undefined)
    ?.find((arg) => arg.startsWith(`--${flag}=`))
    ?.slice(flag.length + 3);

const hostPort = (address: string) => {
  const url = new URL(address.includes('://') ? address : `tcp://${address}`);
  return { host: url.hostname, port: Number(url.port) };
};

/** What the servers' configuration must agree with; each problem is one line. */
function serverProblems(doc: Doc, vars: Record<string, string>): string[] {
  const problems: string[] = [];
  const services = doc.services as Doc;
  const servers = ['dlm1', 'dlm2', 'dlm3'].map((name) => [name, services[name]] as const);
  const lb = services.lb as Doc;
  const built = servers.filter(([, s]) => s?.build);
  if (built.length !== 1) problems.push(`one dlm server builds the image, not ${built.length}`);
  for (const [, service] of built) {
    const context = resolve(dirname(COMPOSE), service.build.context);
    const file = resolve(context, service.build.dockerfile ?? 'Dockerfile');
    if (file !== DOCKERFILE) problems.push(`the build is ${file}, not the repository's Dockerfile`);
  }
  const health = /HEALTHCHECK[\s\S]*?\/readyz/.test(dockerfile);
  for (const [name, service] of servers) {
    if (!service) {
      problems.push(`no service ${name}`);
      continue;
    }
    if (service.image !== servers[0]![1]?.image) problems.push(`${name} runs another image`);
    if (!service.healthcheck && !health) problems.push(`${name} has no health check on /readyz`);
    if (lb?.depends_on?.[name]?.condition !== 'service_healthy')
      problems.push(`the balancer does not wait for ${name} to be healthy`);
    const env = { ...imageEnv(dockerfile), ...(service.environment as Record<string, string>) };
    let config: ServerConfig | null;
    try {
      config = parseConfig(
        [],
        Object.fromEntries(Object.entries(env).map(([k, v]) => [k, interpolate(String(v), vars)])),
      );
    } catch (error) {
      problems.push(`${name}: ${(error as Error).message}`);
      continue;
    }
    if (!config) throw new Error('unreachable: no --help');
    const index = name.slice(3);
    const target = hostPort(lb?.environment?.[`DLM_SERVER_${index}`] ?? '');
    if (target.host !== name || target.port !== config.port)
      problems.push(
        `DLM_SERVER_${index} is ${target.host}:${target.port}, ${name} listens on ${config.port}`,
      );
    if (config.auth.length === 0) problems.push(`${name} runs without tokens`);
    problems.push(...backendProblems(name, config.backend, services));
  }
  const exposed = /^EXPOSE\s+(\d+)/m.exec(dockerfile)?.[1];
  if (Number(exposed) !== Number(imageEnv(dockerfile).DLM_PORT))
    problems.push(`the Dockerfile exposes ${exposed}, not its DLM_PORT`);
  return problems;
}

/** The backend the servers use: the three etcd members, each at its advertised client URL. */
function backendProblems(name: string, backend: ServerConfig['backend'], services: Doc): string[] {
  if (backend.kind !== 'etcd') return [`${name} uses the ${backend.kind} backend, not etcd`];
  const members = Object.keys(services).filter((s) => /^etcd\d$/.test(s));
  const problems: string[] = [];
  const reached = backend.endpoints.map((endpoint) => hostPort(endpoint));
  for (const member of members) {
    const advertised = hostPort(flagOf(services[member], 'advertise-client-urls') ?? '');
    if (!reached.some((r) => r.host === advertised.host && r.port === advertised.port))
      problems.push(`${name} does not reach ${member} at ${advertised.host}:${advertised.port}`);
  }
  for (const r of reached) {
    if (!members.includes(r.host)) problems.push(`${name} points at ${r.host}, not a member`);
  }
  return problems;
}

/** The etcd members form one cluster of three: each names all three at their peer URLs. */
function etcdProblems(doc: Doc): string[] {
  const services = doc.services as Doc;
  const members = Object.keys(services).filter((s) => /^etcd\d$/.test(s));
  if (members.length !== 3) return [`${members.length} etcd members, not 3`];
  const expected = members
    .map(
      (m) => `${flagOf(services[m], 'name')}=${flagOf(services[m], 'initial-advertise-peer-urls')}`,
    )
    .sort();
  const problems: string[] = [];
  for (const member of members) {
    if (flagOf(services[member], 'name') !== member) problems.push(`${member} is named otherwise`);
    const cluster = (flagOf(services[member], 'initial-cluster') ?? '').split(',').sort();
    if (cluster.join(',') !== expected.join(','))
      problems.push(
        `${member}'s initial cluster ${cluster.join(',')} is not ${expected.join(',')}`,
      );
    const data = flagOf(services[member], 'data-dir');
    if (!(services[member].volumes as string[] | undefined)?.some((v) => v.endsWith(`:${data}`)))
      problems.push(`${member}'s data dir ${data} is not a volume`);
  }
  return problems;
}

/** The balancer runs the shipped haproxy.cfg, given every variable it reads, on its published port. */
function balancerProblems(doc: Doc): string[] {
  const lb = (doc.services as Doc).lb as Doc | undefined;
  if (!lb) return ['no service lb'];
  const problems: string[] = [];
  const mounted = (lb.volumes as string[]).map((v) => v.split(':'));
  const cfg = mounted.find(([, target]) => target === '/usr/local/etc/haproxy/haproxy.cfg');
  if (!cfg || resolve(dirname(COMPOSE), cfg[0]!) !== HAPROXY)
    problems.push('the balancer does not run deploy/haproxy/haproxy.cfg');
  const wanted = [...haproxyCfg.matchAll(/\$\{(\w+)\}/g)].map((m) => m[1]!);
  for (const name of new Set(wanted)) {
    if (!lb.environment?.[name])
      problems.push(`haproxy.cfg reads ${name}, which the balancer lacks`);
  }
  for (const [, server, variable] of haproxyCfg.matchAll(/^\s*server (\S+) "\$\{(\w+)\}"/gm)) {
    if (variable !== `DLM_SERVER_${server!.slice(3)}`) problems.push(`${server} is ${variable}`);
  }
  const published = (lb.ports as string[]).map((p) => Number(p.split(':').at(-1)));
  const bind = hostPort(lb.environment?.DLM_LB_BIND.replace(/^:/, '0.0.0.0:') ?? '');
  if (!published.includes(bind.port))
    problems.push(`the balancer's port ${bind.port} is not published`);
  return problems;
}

function problems(doc: Doc): string[] {
  const line = `ci ${hashToken(newToken())}`;
  return [
    ...serverProblems(doc, { DLM_AUTH_TOKENS: line }),
    ...etcdProblems(doc),
    ...balancerProblems(doc),
  ];
}

describe('deploy/compose/compose.yaml', () => {
  it('agrees with the Dockerfile, haproxy.cfg and the server’s configuration', () => {
    const doc = compose();
    expect(Object.keys(doc.services).sort()).toEqual(
      ['dlm1', 'dlm2', 'dlm3', 'etcd1', 'etcd2', 'etcd3', 'lb'].sort(),
    );
    expect(existsSync(DOCKERFILE)).toBe(true);
    expect(problems(doc)).toEqual([]);
  });

  it('requires tokens: compose refuses to start without DLM_AUTH_TOKENS, and so would the server', () => {
    const env = compose().services.dlm1.environment as Record<string, string>;
    expect(env.DLM_AUTH_TOKENS).toMatch(/^\$\{DLM_AUTH_TOKENS:\?/);
    expect(serverProblems(compose(), {})).toContain('dlm1 runs without tokens');
  });

  it('a broken file is caught (the checks can fail)', () => {
    const breakages: [string, (doc: Doc) => void, string][] = [
      [
        'a server address',
        (d) => (d.services.lb.environment.DLM_SERVER_2 = 'dlm2:7071'),
        'DLM_SERVER_2 is dlm2:7071, dlm2 listens on 7070',
      ],
      [
        'a missing member',
        (d) =>
          (d.services.dlm3.environment.DLM_ETCD_ENDPOINTS = 'http://etcd1:2379,http://etcd2:2379'),
        'dlm3 does not reach etcd3 at etcd3:2379',
      ],
      [
        'the cluster',
        (d) => d.services.etcd2.command.splice(-2, 1, '--initial-cluster=etcd2=http://etcd2:2380'),
        "etcd2's initial cluster",
      ],
      [
        'a variable',
        (d) => delete d.services.lb.environment.DLM_LB_STATS,
        'haproxy.cfg reads DLM_LB_STATS, which the balancer lacks',
      ],
      [
        'the health wait',
        (d) => (d.services.lb.depends_on.dlm1 = { condition: 'service_started' }),
        'the balancer does not wait for dlm1 to be healthy',
      ],
      [
        'the published port',
        (d) => (d.services.lb.ports = ['8080:8080']),
        "the balancer's port 7070 is not published",
      ],
    ];
    for (const [what, breakIt, expected] of breakages) {
      const doc = compose();
      breakIt(doc);
      expect(problems(doc).join('\n'), what).toContain(expected);
    }
  });
});
