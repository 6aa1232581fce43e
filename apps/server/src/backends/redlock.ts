import { defineKind, redact, whenReady } from '../backend-kind.js';
import { listSetting } from '../config-sources.js';

/** `--backend redlock`: independent Redis nodes by their URLs. */
export const redlock = defineKind('redlock', {
  flags: { 'redlock-urls': 'string' },
  help: '  --redlock-urls U1,U2,U3  redlock: independent Redis nodes (DLM_REDLOCK_URLS)',
  parse: (from) => ({ urls: listSetting(from, 'redlock-urls') }),
  async open(config, { clock }) {
    const { redlockBackend } = await import('@dlm/adapter-redlock');
    return whenReady(redlockBackend({ urls: config.urls, ...(clock ? { clock } : {}) }));
  },
  describe: (config) => ({ backend: 'redlock', redlockUrls: config.urls.map(redact) }),
  args: (config) => ['--backend', 'redlock', '--redlock-urls', config.urls.join(',')],
});
