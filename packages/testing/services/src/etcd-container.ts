import {
  type ContainerProcess,
  removeAll,
  serviceImage,
  startContainer,
} from './container-process.js';
import {
  type EtcdMember,
  type EtcdOptions,
  type EtcdService,
  etcdHealthy,
  etcdService,
  planEtcdCluster,
} from './etcd.js';
import { allStarted } from './process.js';

/**
 * etcd members in containers (the `docker` provider of `startEtcd`/`startEtcdCluster`): one
 * container per member, on free loopback ports of the host network. The command names
 * `/usr/local/bin/etcd`, where both the official image (which has no entrypoint) and the
 * locally built dlm-test/etcd:local keep it.
 */

/** A cluster of `size` members in containers, resolved once every member reports healthy. */
export async function startEtcdContainers(
  size: number,
  options: EtcdOptions = {},
): Promise<EtcdService> {
  // Inside the member's own container: it survives kill and start, goes with remove.
  const { specs, args } = await planEtcdCluster(size, options, (name) => `/var/lib/etcd/${name}`);
  // Members of a new cluster only become healthy once a quorum of them runs: start all at once.
  const members = await allStarted(
    specs.map(async (spec): Promise<EtcdMember & { process: ContainerProcess }> => {
      const managed = await startContainer({
        name: `etcd ${spec.name} (docker)`,
        image: serviceImage('etcd'),
        command: ['/usr/local/bin/etcd', ...args(spec)],
        ready: () => etcdHealthy(spec.clientUrl),
      });
      return { ...spec, process: managed };
    }),
    (member) => member.process.remove(),
  );
  const base = etcdService(
    members.map((member) => member.clientUrl),
    members,
    false,
  );
  return { ...base, stop: () => removeAll(members) };
}
