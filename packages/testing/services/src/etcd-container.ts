import { type ContainerProcess, startContainer } from './container-process.js';
import {
  type EtcdMember,
  type EtcdOptions,
  type EtcdService,
  etcdHealthy,
  etcdService,
} from './etcd.js';
import { freePort } from './process.js';

/**
 * etcd members in containers (the `docker` provider of `startEtcd`/`startEtcdCluster`): one
 * container per member, on free loopback ports of the host network. The command names
 * `/usr/local/bin/etcd`, where both the official image (which has no entrypoint) and the
 * locally built dlm-test/etcd:local keep it.
 */

export const ETCD_IMAGE_ENV = 'DLM_TEST_ETCD_IMAGE';

export function etcdImage(): string {
  return process.env[ETCD_IMAGE_ENV]?.trim() || 'gcr.io/etcd-development/etcd:v3.5.17';
}

/** A cluster of `size` members in containers, resolved once every member reports healthy. */
export async function startEtcdContainers(
  size: number,
  options: EtcdOptions = {},
): Promise<EtcdService> {
  const token = `dlm-${process.pid}-${Date.now()}`;
  const specs = [];
  for (let i = 1; i <= size; i++) {
    specs.push({
      name: `n${i}`,
      clientUrl: `http://127.0.0.1:${await freePort()}`,
      peerUrl: `http://127.0.0.1:${await freePort()}`,
      // Inside the member's own container: it survives kill and start, goes with remove.
      dataDir: `/var/lib/etcd/n${i}`,
    });
  }
  const initialCluster = specs.map((spec) => `${spec.name}=${spec.peerUrl}`).join(',');
  const timing = [
    ...(options.heartbeatIntervalMs
      ? ['--heartbeat-interval', `${options.heartbeatIntervalMs}`]
      : []),
    ...(options.electionTimeoutMs ? ['--election-timeout', `${options.electionTimeoutMs}`] : []),
  ];
  // Members of a new cluster only become healthy once a quorum of them runs: start all at once.
  const started = await Promise.allSettled(
    specs.map(async (spec): Promise<EtcdMember & { process: ContainerProcess }> => {
      const managed = await startContainer({
        name: `etcd ${spec.name} (docker)`,
        image: etcdImage(),
        command: [
          '/usr/local/bin/etcd',
          '--name',
          spec.name,
          '--data-dir',
          spec.dataDir,
          '--listen-client-urls',
          spec.clientUrl,
          '--advertise-client-urls',
          spec.clientUrl,
          '--listen-peer-urls',
          spec.peerUrl,
          '--initial-advertise-peer-urls',
          spec.peerUrl,
          '--initial-cluster',
          initialCluster,
          '--initial-cluster-state',
          'new',
          '--initial-cluster-token',
          token,
          '--logger',
          'zap',
          '--log-level',
          'warn',
          ...timing,
        ],
        ready: () => etcdHealthy(spec.clientUrl),
      });
      return { ...spec, process: managed };
    }),
  );
  const members = started.flatMap((result) =>
    result.status === 'fulfilled' ? [result.value] : [],
  );
  const removeAll = () => Promise.all(members.map((member) => member.process.remove()));
  const failed = started.find((result) => result.status === 'rejected');
  if (failed) {
    await removeAll();
    throw failed.reason;
  }
  const base = etcdService(
    members.map((member) => member.clientUrl),
    members,
    false,
  );
  return {
    ...base,
    async stop() {
      await removeAll();
    },
  };
}
