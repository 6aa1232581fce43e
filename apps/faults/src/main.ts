#!/usr/bin/env node
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { UsageError, usageFailure } from '@dlm/flags';
import { runCampaign } from './campaign.js';
import { type FaultsCommand, parseFaultsArgs, USAGE } from './options.js';
import { mergeReports, renderMarkdown, writeReport } from './report.js';

let command: FaultsCommand;
try {
  command = parseFaultsArgs(process.argv.slice(2));
} catch (error) {
  if (!(error instanceof UsageError)) throw error;
  process.stderr.write(usageFailure('dlm-faults', error));
  process.exit(2);
}
if (command.kind === 'help') {
  process.stdout.write(`${USAGE}\n`);
  process.exit(0);
}

const label =
  command.label ??
  `${command.short ? 'short' : command.kind === 'merge' ? 'merged' : 'campaign'}-${new Date().toISOString().replace(/[:.]/g, '-')}`;
const out = command.out ?? fileURLToPath(new URL('../results/', import.meta.url));
const log = (line: string) =>
  process.stderr.write(`[faults ${new Date().toISOString().slice(11, 19)}] ${line}\n`);

const result =
  command.kind === 'merge'
    ? mergeReports(command.files.map((file) => readFileSync(file, 'utf8')))
    : await runCampaign({ ...command.campaign, log });
const files = writeReport(result, out, label);
process.stdout.write(renderMarkdown(result));
log(`report: ${files.markdown} and ${files.json}`);
process.exit(result.passed ? 0 : 1);
