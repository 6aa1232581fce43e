import { defineKind } from '../backend-kind.js';
import { listSetting } from '../config-sources.js';

/** `--backend zookeeper`: the ensemble by its connect string, `host:port,host:port`. */
export const zookeeper = defineKind('zookeeper', {
  flags: { 'zk-connect': 'string' },
  help: '  --zk-connect H:P,H:P     zookeeper: connect string (DLM_ZK_CONNECT)',
  parse: (from) => ({ connect: listSetting(from, 'zk-connect').join(',') }),
  async open(config) {
    const { zookeeperBackend } = await import('@dlm/adapter-zookeeper');
    return zookeeperBackend({ connect: config.connect });
  },
  describe: (config) => ({ backend: 'zookeeper', connect: config.connect }),
  args: (config) => ['--backend', 'zookeeper', '--zk-connect', config.connect],
});
