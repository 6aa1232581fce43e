import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';

/**
 * Loaded into a process with `node --import …/heap-sampler.js` (pair-cost does so for the dlm
 * server): the first SIGUSR2 starts V8's sampling heap profiler, collected objects included (what
 * the process allocated, not only what stayed); the second stops it and writes the sampled bytes
 * per allocation site, as JSON, to `$DLM_HEAP_SAMPLER_OUT`.
 */

interface SampleNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: SampleNode[];
}

/** Bytes per allocation site (function, file and line), largest first. */
export function allocationSites(root: SampleNode): Array<[string, number]> {
  const bySite = new Map<string, number>();
  const visit = (node: SampleNode) => {
    const { functionName, url, lineNumber } = node.callFrame;
    const file = url.replace(/^.*\/(packages|apps|node_modules)\//, '$1/');
    const site = `${functionName || '(anonymous)'} ${file}:${lineNumber + 1}`;
    bySite.set(site, (bySite.get(site) ?? 0) + node.selfSize);
    for (const child of node.children) visit(child);
  };
  visit(root);
  return [...bySite].sort((a, b) => b[1] - a[1]);
}

export const SAMPLING = {
  samplingInterval: 4_096,
  includeObjectsCollectedByMajorGC: true,
  includeObjectsCollectedByMinorGC: true,
};

const out = process.env.DLM_HEAP_SAMPLER_OUT;
if (out) {
  const session = new Session();
  session.connect();
  let sampling = false;
  process.on('SIGUSR2', () => {
    if (!sampling) {
      sampling = true;
      session.post('HeapProfiler.startSampling', SAMPLING);
      return;
    }
    sampling = false;
    session.post('HeapProfiler.stopSampling', (error, result) => {
      const sites = error ? [] : allocationSites(result.profile.head as unknown as SampleNode);
      writeFileSync(out, JSON.stringify({ error: error?.message, sites }));
    });
  });
}
