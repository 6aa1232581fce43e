import { defineKind } from '../backend-kind.js';
import { listSetting } from '../config-sources.js';

/** `--backend etcd`: the cluster by its client URLs. */
export const etcd = defineKind('etcd', {
  flags: { 'etcd-endpoints': 'string' },
  help: '  --etcd-endpoints E1,E2   etcd: client URLs (DLM_ETCD_ENDPOINTS)',
  parse: (from) => ({ endpoints: listSetting(from, 'etcd-endpoints') }),
  async open(config) {
    const { etcdBackend } = await import('@dlm/adapter-etcd');
    return etcdBackend({ endpoints: config.endpoints });
  },
  describe: (config) => ({ backend: 'etcd', endpoints: config.endpoints }),
  args: (config) => ['--backend', 'etcd', '--etcd-endpoints', config.endpoints.join(',')],
});
