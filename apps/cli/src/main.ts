#!/usr/bin/env node
import { readPackageVersion, UsageError, usageFailure, withoutLeadingSeparator } from '@dlm/flags';
import type { Command } from './command.js';
import { EXIT } from './exit-codes.js';

/**
 * Each command's module is loaded only when it runs: `dlm get` need not load the server (which
 * is an optional peer: `dlm serve` says what to install when it is absent).
 */
const COMMANDS: Array<{ name: string; summary: string; load: () => Promise<Command> }> = [
  {
    name: 'lock',
    summary: 'run a command while holding a lock',
    load: async () => (await import('./commands/lock.js')).lockCommand,
  },
  {
    name: 'get',
    summary: 'show who holds a lock',
    load: async () => (await import('./commands/get.js')).getCommand,
  },
  {
    name: 'check',
    summary: 'ask whether a fencing token holds a lock now (exit 0 yes, 1 no)',
    load: async () => (await import('./commands/check.js')).checkCommand,
  },
  {
    name: 'ls',
    summary: 'list held locks',
    load: async () => (await import('./commands/ls.js')).lsCommand,
  },
  {
    name: 'watch',
    summary: 'print a lock’s changes as they happen',
    load: async () => (await import('./commands/watch.js')).watchCommand,
  },
  {
    name: 'request-release',
    summary: 'ask a lock’s holders to let go',
    load: async () => (await import('./commands/request-release.js')).requestReleaseCommand,
  },
  {
    name: 'serve',
    summary: 'run the lock server (same flags and environment as dlm-server; needs @dlm/server)',
    load: async () => (await import('./commands/serve.js')).loadServeCommand(),
  },
];

/** The commands' column in the help: the longest name and two spaces. */
const WIDTH = Math.max(...COMMANDS.map((command) => command.name.length)) + 2;

function version(): string {
  return readPackageVersion(new URL('../package.json', import.meta.url));
}

const HELP = `Usage: dlm COMMAND [options]

Commands:
${COMMANDS.map((command) => `  ${command.name.padEnd(WIDTH)}${command.summary}`).join('\n')}

Run dlm COMMAND --help for a command's options. Every command that talks to a server takes
--server URL (or DLM_URL; default ws://127.0.0.1:7070/v1/ws), and for a server with tokens
and TLS its token (DLM_TOKEN, or --token-file FILE) and --ca FILE (DLM_CA).

Examples:
  dlm serve --data-dir /var/lib/dlm
  dlm lock nightly-backup --ttl 1m --wait 0 -- ./backup.sh
  dlm ls --prefix jobs/
  dlm get nightly-backup --json
  dlm check nightly-backup 42
  dlm watch nightly-backup
`;

async function main(argv: string[]): Promise<number | undefined> {
  // `pnpm dlm -- ls` hands the `--` on (pnpm 12): before the command name it is no argument.
  const [name, ...rest] = withoutLeadingSeparator(argv);
  if (name === undefined || name === '-h' || name === '--help' || name === 'help') {
    const topic =
      name === 'help' ? COMMANDS.find((command) => command.name === rest[0]) : undefined;
    process.stdout.write(topic ? (await topic.load()).usage : HELP);
    return name === undefined ? EXIT.USAGE : EXIT.OK;
  }
  if (name === '--version' || name === '-V') {
    process.stdout.write(`${version()}\n`);
    return EXIT.OK;
  }
  const entry = COMMANDS.find((candidate) => candidate.name === name);
  if (!entry) {
    const unknown = new UsageError(`unknown command ${JSON.stringify(name)}`);
    process.stderr.write(usageFailure('dlm', unknown));
    return EXIT.USAGE;
  }
  const command = await entry.load();
  try {
    return await command.run(rest);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(usageFailure(`dlm ${command.name}`, error));
    return EXIT.USAGE;
  }
}

const code = await main(process.argv.slice(2));
if (code !== undefined) process.exit(code);
