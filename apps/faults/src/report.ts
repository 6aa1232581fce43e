import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { CampaignResult, SegmentReport } from './campaign.js';
import { PROPERTIES, type Property, type Violation } from './checker.js';
import { NEMESES } from './nemeses.js';

function percentile(values: number[], p: number): number | undefined {
  if (!values.length) return undefined;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
}

const ms = (value: number | undefined) => (value === undefined ? '–' : `${Math.round(value)}`);

export function recoverySummary(segment: SegmentReport) {
  const recovered = segment.check.recoveryMs.filter((v): v is number => v !== null);
  return {
    p50: percentile(recovered, 0.5),
    max: recovered.length ? Math.max(...recovered) : undefined,
    notRecovered: segment.check.recoveryMs.length - recovered.length,
    takeoverMax: segment.check.takeoverMs.length
      ? Math.max(...segment.check.takeoverMs)
      : undefined,
  };
}

function cell(segment: SegmentReport, property: Property): string {
  const count = segment.check.counts[property];
  if (!count) return '0';
  return segment.expected[property] ? `${count} (exp.)` : `**${count}** ✗`;
}

/** The report as Markdown: the table, what was run, and examples of every violation. */
export function renderMarkdown(result: CampaignResult): string {
  const { options } = result;
  const lines: string[] = [];
  lines.push('# dlm fault-injection campaign', '');
  lines.push(
    `${result.startedAt} → ${result.finishedAt}. ${options.workers} workload processes on ${options.keys} lock names per segment, TTL ${options.ttlMs} ms; each segment injects faults for the time in column \`s\`, then heals everything and gives the system TTL + 3 s to recover. L1 bound ${options.l1BoundMs} ms, L4 bound ${options.l4BoundMs} ms.`,
    '',
  );
  lines.push(
    `**Result: ${result.passed ? 'PASSED' : 'FAILED'}** — ${result.segments.reduce((n, s) => n + s.unexpected, 0)} unexpected violations` +
      (result.negativeControl
        ? `; negative control ${result.negativeControl.detected ? `detected (${result.negativeControl.lostUpdates} lost updates reported with fencing off)` : 'NOT detected'}`
        : '') +
      (result.linNegativeControl
        ? `; linearizability negative control ${result.linNegativeControl.detected ? `detected (${result.linNegativeControl.violations} names flagged in ${result.linNegativeControl.ops} operations with tokens taken before the row lock)` : 'NOT detected'}`
        : '') +
      (result.lockDelayControl
        ? `; lock-delay negative control ${result.lockDelayControl.detected ? `detected (${result.lockDelayControl.violations} S9 violations on ${result.lockDelayControl.backend} with the delay ignored)` : 'NOT detected'}`
        : '') +
      (result.holdCapControl
        ? `; hold-cap negative control ${result.holdCapControl.detected ? `detected (${result.holdCapControl.violations} S10 violations on ${result.holdCapControl.backend} with the cap ignored)` : 'NOT detected'}`
        : '') +
      '.',
    '',
  );
  lines.push(
    `| backend | nemesis | s | ops | unknown | grants | writes | refused | faults | meddling refused | ${PROPERTIES.join(' | ')} | recovery p50 / max ms | L1 takeover max ms |`,
    `|---|---|--:|--:|--:|--:|--:|--:|--:|--:|${PROPERTIES.map(() => '--:|').join('')}--:|--:|`,
  );
  for (const segment of result.segments) {
    const { stats } = segment.check;
    const recovery = recoverySummary(segment);
    const recoveryCell =
      stats.faults === 0
        ? '–'
        : `${ms(recovery.p50)} / ${ms(recovery.max)}${recovery.notRecovered ? ` (${recovery.notRecovered} not)` : ''}`;
    lines.push(
      `| ${segment.backend} | ${segment.nemesis}${segment.negativeControl ? ' **(fencing off)**' : ''}${segment.workload ? ` · ${segment.workload} (${segment.workloadDetail ?? ''})` : ''} | ${Math.round(segment.durationMs / 1000)} | ${stats.ops} | ${stats.unknown} | ${stats.grants} | ${stats.writes} | ${stats.staleRefused} | ${stats.faults} | ${stats.meddling ? `${stats.meddling.refused}/${stats.meddling.answered}` : '–'} | ${PROPERTIES.map((p) => cell(segment, p)).join(' | ')} | ${recoveryCell} | ${ms(recovery.takeoverMax)} |`,
    );
  }
  lines.push('');
  lines.push(
    "`(exp.)`: expected from what the backend declares (see Notes); **✗**: a failure. Recovery: from the end of each fault to the next acknowledged write. L1 takeover: from a dead or paused holder's lease end to the next grant of its lock.",
    '',
  );
  if (result.segments.some((segment) => segment.workload)) {
    lines.push(
      "`· semaphore` and `· read-write` rows: one run per nemesis with both side by side, each on a lock name of its own: a semaphore (every acquire shared with the limit) and a read-write lock (writes exclusive, doing the fenced read-modify-write; reads shared at the server's maximum, holding only), checked for S7 above all.",
      '',
    );
  }
  for (const line of result.sharedSkipped ?? []) {
    lines.push(`- semaphore and read-write workloads skipped on ${line}`);
  }
  if (result.sharedSkipped?.length) lines.push('');

  const notes = new Map<string, string[]>();
  for (const segment of result.segments) {
    for (const [property, reason] of Object.entries(segment.expected)) {
      if (!reason) continue;
      const key = `${segment.backend}: ${reason}`;
      notes.set(key, [...(notes.get(key) ?? []), `${segment.nemesis} ${property}`]);
    }
  }
  if (notes.size) {
    lines.push('## Notes', '');
    for (const [key, where] of notes) lines.push(`- ${key} (${[...new Set(where)].join(', ')})`);
    lines.push('');
  }

  if (result.lockSegments?.length) {
    lines.push('## Linearizability', '');
    lines.push(
      `Try-acquire / release / get by ${options.lockConnections ?? 8} connections spread over the servers (two where the backend is shared; the nemesis acts on the first), on ${options.lockNames ?? 3} names, each name's history checked against a plain try-lock with fencing tokens (free or held by one token; a grant's token above every earlier grant's; a lease ends on its own only after its TTL). Operations whose reply was lost may or may not have taken effect.`,
      '',
      '| backend | nemesis | servers | s | ops | unknown | names | linearizable | not | inconclusive |',
      '|---|---|--:|--:|--:|--:|--:|--:|--:|--:|',
    );
    for (const segment of result.lockSegments) {
      const { check } = segment;
      const linearizable = check.names.filter((n) => n.verdict === 'linearizable').length;
      const not = !check.violations
        ? '0'
        : segment.expected
          ? `${check.violations} (exp.)`
          : `**${check.violations}** ✗`;
      lines.push(
        `| ${segment.backend} | ${segment.nemesis} | ${segment.servers} | ${Math.round(segment.durationMs / 1000)} | ${check.ops} | ${check.unknown} | ${check.names.length} | ${linearizable} | ${not} | ${check.inconclusive} |`,
      );
    }
    lines.push('');
    for (const segment of result.lockSegments) {
      for (const name of segment.check.names) {
        if (name.verdict !== 'not-linearizable') continue;
        lines.push(
          `- ${segment.backend} × ${segment.nemesis} \`${name.name}\`${segment.expected ? ` (expected: ${segment.expected})` : ''}: ${name.message}`,
        );
      }
      for (const error of segment.errors) {
        lines.push(`- ${segment.backend} × ${segment.nemesis} injection error: ${error}`);
      }
    }
    const control = result.linNegativeControl;
    if (control) {
      lines.push(
        `Negative control (${control.backend}, two servers whose try-lock takes its token before the name's row lock, ${Math.round(control.durationMs / 1000)} s, no faults): ${control.ops} operations, ${control.violations} names not linearizable — ${control.detected ? 'detected' : '**NOT detected** ✗'}.${control.example ? ` First: ${control.example}` : ''}`,
        '',
      );
    }
    lines.push('');
  }

  lines.push(...propertiesAndNemeses(result));

  const withViolations = result.segments.filter(
    (s) => s.check.violations.length || s.errors.length,
  );
  if (withViolations.length || result.errors.length) {
    lines.push('## Violations and errors (first 5 per property)', '');
    for (const error of result.errors) lines.push(`- error: ${error.split('\n')[0]}`);
    for (const segment of withViolations) {
      lines.push(
        `### ${segment.backend} × ${segment.nemesis}${segment.negativeControl ? ' (fencing off)' : ''}${segment.workload ? ` · ${segment.workload}` : ''}`,
        '',
      );
      for (const error of segment.errors) lines.push(`- injection error: ${error}`);
      for (const property of PROPERTIES) {
        const list = segment.check.violations.filter((v) => v.property === property);
        for (const violation of list.slice(0, 5)) {
          lines.push(`- ${property} \`${violation.name}\`: ${violation.message}`);
        }
        if (list.length > 5) lines.push(`- ${property}: … ${list.length - 5} more`);
      }
      lines.push('');
    }
  }
  return `${lines.join('\n')}\n`;
}

/** What each property means, and the nemeses the campaign used. */
function propertiesAndNemeses(result: CampaignResult): string[] {
  const { options } = result;
  const lines: string[] = [];
  lines.push('## Properties', '');
  lines.push(
    '- S1: the fenced resource never accepts a token lower than one it accepted (its own log).',
    "- S2: per lock, grants' tokens are unique and increase in real-time order.",
    '- S3: no lost update: every accepted write adds one to the counter, no two acknowledged writes read the same value, and the final counter is not below the writes.',
    '- S4: a release or extend with a token succeeds only if no newer grant had completed before it was sent, and never for a process that was not granted that token (the meddlers: "meddling refused" counts their answered releases and extends, and how many got NOT_HOLDER).',
    '- S5: no grant arrives after a newer grant of the lock completed, or with no time left (judged where the client was not paused and its link was clean while the reply was on its way).',
    '- S6: no exclusive grant completes while an older exclusive holder still holds the lock by its own local deadline (and has not released it).',
    "- S7 (the semaphore and read-write workloads): never more than `limit` shared holders of a name at once, all on one limit, and never an exclusive holder beside a shared one; a holder holds from its grant's reply to its release's request, its reported loss or its local deadline.",
    `- L1: after a holder is killed or paused, the next waiter gets the lock within ${options.l1BoundMs} ms of the holder's lease end (counted from the last renewal's reply).`,
    `- L4: a client reports a lease lost within ${options.l4BoundMs} ms of its local deadline, or of its resumption when it was paused then.`,
    '',
  );

  lines.push('## Nemeses', '');
  const used = new Set(
    [...result.segments, ...(result.lockSegments ?? [])].map((segment) => segment.nemesis),
  );
  for (const nemesis of NEMESES) {
    if (used.has(nemesis.name)) lines.push(`- \`${nemesis.name}\`: ${nemesis.description}`);
  }
  lines.push('');
  return lines;
}

/** The JSON form: everything in the Markdown, with at most 20 violations per property kept. */
export function toJson(result: CampaignResult): unknown {
  return {
    ...result,
    segments: result.segments.map((segment) => {
      const examples: Violation[] = [];
      for (const property of PROPERTIES) {
        examples.push(
          ...segment.check.violations.filter((v) => v.property === property).slice(0, 20),
        );
      }
      return {
        ...segment,
        recovery: recoverySummary(segment),
        check: { ...segment.check, violations: examples },
      };
    }),
  };
}

/** Writes `<label>.md` and `<label>.json` into `dir`; returns their paths. */
export function writeReport(result: CampaignResult, dir: string, label: string) {
  mkdirSync(dir, { recursive: true });
  const markdown = join(dir, `${label}.md`);
  const json = join(dir, `${label}.json`);
  writeFileSync(markdown, renderMarkdown(result));
  writeFileSync(json, `${JSON.stringify(toJson(result), null, 2)}\n`);
  return { markdown, json };
}

/**
 * Several reports (the JSON files of `writeReport`) as one, for a long campaign run backend by
 * backend. Each file keeps at most 20 violations per property: the rest are counted, not listed.
 */
export function mergeReports(jsons: string[]): CampaignResult {
  const parts = jsons.map((text) => JSON.parse(text) as CampaignResult);
  const first = parts[0];
  if (!first) throw new Error('nothing to merge');
  const controls = parts.flatMap((part) => (part.negativeControl ? [part.negativeControl] : []));
  const linControl = parts.find((part) => part.linNegativeControl)?.linNegativeControl;
  const delayControl = parts.find((part) => part.lockDelayControl)?.lockDelayControl;
  const capControl = parts.find((part) => part.holdCapControl)?.holdCapControl;
  return {
    startedAt: parts.map((part) => part.startedAt).sort()[0]!,
    finishedAt: parts
      .map((part) => part.finishedAt)
      .sort()
      .at(-1)!,
    options: {
      ...first.options,
      plan: Object.assign({}, ...parts.map((part) => part.options.plan)),
      lockPlan: Object.assign({}, ...parts.map((part) => part.options.lockPlan ?? {})),
      sharedPlan: Object.assign({}, ...parts.map((part) => part.options.sharedPlan ?? {})),
    },
    segments: parts.flatMap((part) => part.segments),
    lockSegments: parts.flatMap((part) => part.lockSegments ?? []),
    errors: parts.flatMap((part) => part.errors),
    sharedSkipped: parts.flatMap((part) => part.sharedSkipped ?? []),
    negativeControl: controls.length
      ? {
          run: controls.some((c) => c.run),
          detected: controls.some((c) => c.detected),
          lostUpdates: controls.reduce((n, c) => n + c.lostUpdates, 0),
        }
      : undefined,
    linNegativeControl: linControl,
    lockDelayControl: delayControl,
    holdCapControl: capControl,
    passed: parts.every((part) => part.passed),
  };
}
