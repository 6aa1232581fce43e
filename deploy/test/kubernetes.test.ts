import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { freePort, startProcess } from '@dlm/test-services';
import { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import { ConfigMap } from 'kubernetes-models/v1/ConfigMap';
import { Secret } from 'kubernetes-models/v1/Secret';
import { Service } from 'kubernetes-models/v1/Service';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';

const DIR = fileURLToPath(new URL('../kubernetes/', import.meta.url));
const SERVER = fileURLToPath(new URL('../../apps/server/dist/main.js', import.meta.url));

type Manifest = Record<string, any>;

const read = (file: string): Manifest => parse(readFileSync(`${DIR}${file}`, 'utf8')) as Manifest;
const kinds: Record<string, new (data: Manifest) => { validate(): void }> = {
  ConfigMap,
  Secret,
  Deployment,
  Service,
  PodDisruptionBudget,
};

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

  it('a schema violation is caught (the check can fail)', () => {
    const broken = structuredClone(byKind('Deployment'));
    broken.spec.replicas = 'three';
    expect(() => new Deployment(broken).validate()).toThrow();
  });

  it('the selectors match the pods, and the probes and port are the server’s', () => {
    const deployment = byKind('Deployment');
    const labels = deployment.spec.template.metadata.labels;
    expect(deployment.spec.selector.matchLabels).toEqual(labels);
    expect(byKind('Service').spec.selector).toEqual(labels);
    expect(byKind('PodDisruptionBudget').spec.selector.matchLabels).toEqual(labels);
    expect(byKind('PodDisruptionBudget').spec.minAvailable).toBeLessThan(deployment.spec.replicas);
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
    const env: Record<string, string> = {
      ...byKind('ConfigMap').data,
      ...byKind('Secret').stringData,
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
