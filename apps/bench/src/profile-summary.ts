#!/usr/bin/env node
import { readFileSync } from 'node:fs';

/**
 * Summarises a V8 `.cpuprofile` (from `node --cpu-prof`, or `pnpm bench --profile-dir`):
 * self time per function, inclusive time per function, and self time per file. Usage:
 *   node apps/bench/dist/profile-summary.js FILE.cpuprofile [--top N] [--grep TEXT]
 */

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

function shortUrl(url: string): string {
  if (!url) return '(native)';
  const path = url.replace(/^file:\/\//, '');
  const pnpm = /node_modules\/\.pnpm\/[^/]+\/node_modules\/(.*)$/.exec(path);
  if (pnpm) return pnpm[1]!;
  const workspace = /\/(apps|packages|tooling)\/(.*)$/.exec(path);
  if (workspace) return `${workspace[1]}/${workspace[2]}`;
  return path;
}

function frameKey(frame: CallFrame): string {
  const name = frame.functionName || '(anonymous)';
  return frame.url ? `${name}  ${shortUrl(frame.url)}:${frame.lineNumber + 1}` : name;
}

export function summarize(profile: Profile, top: number, grep?: string): string {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const parent = new Map<number, number>();
  for (const node of profile.nodes)
    for (const child of node.children ?? []) parent.set(child, node.id);
  const selfUs = new Map<number, number>();
  profile.samples.forEach((id, i) => {
    selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
  });
  const total = [...selfUs.values()].reduce((a, b) => a + b, 0);
  let idle = 0;
  const self = new Map<string, number>();
  const inclusive = new Map<string, number>();
  const files = new Map<string, number>();
  for (const [id, us] of selfUs) {
    const node = byId.get(id)!;
    const name = node.callFrame.functionName;
    if (name === '(idle)') {
      idle += us;
      continue;
    }
    const key = frameKey(node.callFrame);
    self.set(key, (self.get(key) ?? 0) + us);
    const file = shortUrl(node.callFrame.url);
    files.set(file, (files.get(file) ?? 0) + us);
    // Inclusive: every distinct frame on the stack gets the sample once.
    const seen = new Set<string>();
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const frame = frameKey(byId.get(at)!.callFrame);
      if (seen.has(frame)) continue;
      seen.add(frame);
      inclusive.set(frame, (inclusive.get(frame) ?? 0) + us);
    }
  }
  const busy = total - idle;
  const pct = (us: number) => `${((100 * us) / busy).toFixed(1).padStart(5)}%`;
  const list = (map: Map<string, number>) =>
    [...map]
      .filter(([key]) => !grep || key.includes(grep))
      .filter(([key]) => !key.startsWith('(idle)') && !key.startsWith('(root)'))
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([key, us]) => `  ${pct(us)}  ${(us / 1000).toFixed(0).padStart(6)} ms  ${key}`)
      .join('\n');
  return [
    `profile: ${((profile.endTime - profile.startTime) / 1e6).toFixed(1)} s wall, ${(busy / 1e3).toFixed(0)} ms on CPU (${((100 * busy) / total).toFixed(0)}% of samples not idle); percentages are of CPU time`,
    '',
    'self time by function:',
    list(self),
    '',
    'inclusive time by function:',
    list(inclusive),
    '',
    'self time by file:',
    list(files),
  ].join('\n');
}

const args = process.argv.slice(2);
const file = args.find((arg) => !arg.startsWith('--'));
if (!file) {
  process.stderr.write('usage: profile-summary FILE.cpuprofile [--top N] [--grep TEXT]\n');
  process.exit(2);
}
const topIndex = args.indexOf('--top');
const grepIndex = args.indexOf('--grep');
const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;
process.stdout.write(
  `${summarize(
    profile,
    topIndex >= 0 ? Number(args[topIndex + 1]) : 30,
    grepIndex >= 0 ? args[grepIndex + 1] : undefined,
  )}\n`,
);
