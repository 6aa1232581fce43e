import type { BackendKind } from '../backend-kind.js';
import { redact, whenReady } from '../backend-kind.js';
import { listSetting } from '../config-sources.js';

export interface RedlockConfig {
  kind: 'redlock';
  /** The independent Redis nodes. */
  urls: string[];
}

export const redlock: BackendKind<RedlockConfig> = {
  kind: 'redlock',
  flags: { 'redlock-urls': 'string' },
  help: '  --redlock-urls U1,U2,U3  redlock: independent Redis nodes (DLM_REDLOCK_URLS)',
  parse: (from) => ({ kind: 'redlock', urls: listSetting(from, 'redlock-urls') }),
  async open(config, { clock }) {
    const { redlockBackend } = await import('@dlm/adapter-redlock');
    return whenReady(redlockBackend({ urls: config.urls, ...(clock ? { clock } : {}) }));
  },
  describe: (config) => ({ backend: 'redlock', redlockUrls: config.urls.map(redact) }),
  args: (config) => ['--backend', 'redlock', '--redlock-urls', config.urls.join(',')],
};
