import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { AuthConfigError, hashToken, newToken, parseTokenFile } from '@dlm/server';
import { freePort, startProcess } from '@dlm/test-services';
import { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import { StatefulSet } from 'kubernetes-models/apps/v1/StatefulSet';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import { ConfigMap } from 'kubernetes-models/v1/ConfigMap';
import { Service } from 'kubernetes-models/v1/Service';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';

const DIR = fileURLToPath(new URL('../kubernetes/', import.meta.url));
const SERVER = fileURLToPath(new URL('../../apps/server/dist/main.js', import.meta.url));

type Manifest = Record<string, any>;

const read = (file: string): Manifest => parse(readFileSync(`${DIR}${file}`, 'utf8')) as Manifest;
const kinds: Record<string, new (data: Manifest) => { validate(): void }> = {
  ConfigMap,
  Deployment,
  StatefulSet,
  Service,
  PodDisruptionBudget,
};

/**
 * What is wrong between the dlm servers' etcd endpoints (the ConfigMap) and the etcd cluster
 * shipped beside them (StatefulSet, headless Service): each endpoint must be a member's stable
 * name, every member listed, and the members' own view of the cluster the same.
 */
function etcdProblems(config: Manifest, statefulSet: Manifest, service: Manifest): string[] {
  const problems: string[] = [];
  const members = Array.from(
    { length: statefulSet.spec.replicas },
    (_, i) => `${statefulSet.metadata.name}-${i}`,
  );
  const domain = statefulSet.spec.serviceName;
  if (service.metadata.name !== domain || service.spec.clusterIP !== 'None') {
    problems.push(`the StatefulSet's serviceName ${domain} is not a headless Service`);
  }
  const selects = Object.entries(service.spec.selector ?? {});
  const labels = statefulSet.spec.template.metadata.labels;
  if (!selects.every(([key, value]) => labels[key] === value)) {
    problems.push('the etcd Service does not select the members');
  }
  const endpoints = String(config.data.DLM_ETCD_ENDPOINTS ?? '').split(',');
  const expected = members.map((member) => `http://${member}.${domain}:2379`);
  if (endpoints.join(',') !== expected.join(',')) {
    problems.push(`DLM_ETCD_ENDPOINTS ${endpoints.join(',')} are not the members ${expected}`);
  }
  const args: string[] = statefulSet.spec.template.spec.containers[0].command;
  const flag = (name: string) => args.find((arg) => arg.startsWith(`--${name}=`))?.split('=')[1];
  const cluster = args.find((arg) => arg.startsWith('--initial-cluster='))?.slice(18);
  const peers = members.map((member) => `${member}=http://${member}.${domain}:2380`).join(',');
  if (cluster !== peers) problems.push(`--initial-cluster ${cluster} is not ${peers}`);
  if (flag('advertise-client-urls') !== `http://$(POD_NAME).${domain}:2379`) {
    problems.push('the members do not advertise their stable names');
  }
  return problems;
}

describe('deploy/kubernetes', () => {
  const files = readdirSync(DIR).filter(
    (file) => file.endsWith('.yaml') && file !== 'kustomization.yaml',
  );
  const manifests = Object.fromEntries(files.map((file) => [file, read(file)]));
  const byKind = (kind: string) => Object.values(manifests).find((m) => m.kind === kind)!;

  it('every manifest validates against the Kubernetes API schema, and kustomization lists them all', () => {
    for (const [file, manifest] of Object.entries(manifests)) {
      const Model = kinds[manifest.kind];
      expect(Model, `${file}: kind ${manifest.kind}`).toBeDefined();
      expect(() => new Model!(manifest).validate(), file).not.toThrow();
    }
    expect([...read('kustomization.yaml').resources].sort()).toEqual([...files].sort());
  });

  it('the etcd the servers point at ships beside them: a 3-member StatefulSet on a headless Service', () => {
    const config = byKind('ConfigMap');
    const statefulSet = byKind('StatefulSet');
    const service = manifests['etcd-service.yaml']!;
    expect(config.data.DLM_BACKEND).toBe('etcd');
    expect(statefulSet.spec.replicas).toBe(3);
    expect(etcdProblems(config, statefulSet, service)).toEqual([]);
    // The check can fail: a cluster of one, an endpoint nobody serves, a Service with an IP.
    const one = structuredClone(statefulSet);
    one.spec.replicas = 1;
    expect(etcdProblems(config, one, service)).toHaveLength(2);
    const elsewhere = structuredClone(config);
    elsewhere.data.DLM_ETCD_ENDPOINTS = 'http://etcd-0.etcd-cluster:2379';
    expect(etcdProblems(elsewhere, statefulSet, service)).toHaveLength(1);
    const plain = structuredClone(service);
    delete plain.spec.clusterIP;
    expect(etcdProblems(config, statefulSet, plain)).toHaveLength(1);
  });

  it('the token Secret is made from tokens.txt, which is not in the repository; its sample is refused', () => {
    const [generator] = read('kustomization.yaml').secretGenerator;
    expect(generator).toEqual({ name: 'dlm-auth', files: ['DLM_AUTH_TOKENS=tokens.txt'] });
    const deployment = byKind('Deployment');
    const [container] = deployment.spec.template.spec.containers;
    expect(container.envFrom).toContainEqual({ secretRef: { name: 'dlm-auth' } });
    // Without tokens.txt `kubectl apply -k` fails; git ignores it, so no real one is committed.
    const ignored = readFileSync(new URL('../../.gitignore', import.meta.url), 'utf8');
    expect(ignored.split('\n')).toContain('/deploy/kubernetes/tokens.txt');
    expect(files).not.toContain('tokens.txt');
    // Copied as it is, the sample stops the server: its hash is a placeholder.
    expect(() => parseTokenFile(readFileSync(`${DIR}tokens.txt.example`, 'utf8'))).toThrow(
      AuthConfigError,
    );
  });

  it('a schema violation is caught (the check can fail)', () => {
    const broken = structuredClone(byKind('Deployment'));
    broken.spec.replicas = 'three';
    expect(() => new Deployment(broken).validate()).toThrow();
  });

  it('the selectors match the pods, and the probes and port are the server’s', () => {
    const deployment = byKind('Deployment');
    const labels = deployment.spec.template.metadata.labels;
    expect(deployment.spec.selector.matchLabels).toEqual(labels);
    expect(manifests['service.yaml']!.spec.selector).toEqual(labels);
    expect(manifests['pdb.yaml']!.spec.selector.matchLabels).toEqual(labels);
    expect(manifests['pdb.yaml']!.spec.minAvailable).toBeLessThan(deployment.spec.replicas);
    const [container] = deployment.spec.template.spec.containers;
    expect(container.readinessProbe.httpGet.path).toBe('/readyz');
    expect(container.livenessProbe.httpGet.path).toBe('/livez');
    const env = Object.fromEntries(container.env.map((e: Manifest) => [e.name, e.value]));
    expect(container.ports[0].containerPort).toBe(Number(env.DLM_PORT));
  });

  it('dlm-server starts on the manifests’ environment and answers both probes', async () => {
    // The ConfigMap's, the Secret's and the container's variables, as the pod would get them;
    // only the addresses are this machine's (loopback, a free port, the embedded backend in
    // place of the cluster's etcd: the backend flags are covered by the server's own tests).
    const deployment = byKind('Deployment');
    const [container] = deployment.spec.template.spec.containers;
    // The Secret as the generator makes it, from a tokens.txt written as the sample says.
    const sample = readFileSync(`${DIR}tokens.txt.example`, 'utf8');
    const tokens = sample.replace(/REPLACE-WITH-THE-SHA256\S*/, hashToken(newToken()));
    expect(parseTokenFile(tokens)).toHaveLength(1);
    const env: Record<string, string> = {
      ...byKind('ConfigMap').data,
      DLM_AUTH_TOKENS: tokens,
      ...Object.fromEntries(container.env.map((e: Manifest) => [e.name, e.value])),
    };
    expect(Object.keys(env).every((name) => name.startsWith('DLM_'))).toBe(true);
    const port = await freePort();
    const server = await startProcess({
      name: 'dlm-server (kubernetes env)',
      command: process.execPath,
      args: [SERVER],
      env: {
        ...process.env,
        ...env,
        DLM_HOST: '127.0.0.1',
        DLM_PORT: String(port),
        DLM_BACKEND: 'embedded',
        DLM_MEMORY: '1',
      },
      ready: async () => (await fetch(`http://127.0.0.1:${port}/livez`)).ok,
    });
    try {
      for (const probe of [container.readinessProbe, container.livenessProbe]) {
        const response = await fetch(`http://127.0.0.1:${port}${probe.httpGet.path}`);
        expect(response.status).toBe(200);
      }
      // The Secret's tokens are in force: the metrics need one.
      expect((await fetch(`http://127.0.0.1:${port}/metrics`)).status).toBe(401);
    } finally {
      await server.stop();
    }
  });
});
