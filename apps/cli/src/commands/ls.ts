import { formatDuration, parseFlags, UsageError } from '@dlm/flags';
import { COMMON_OPTIONS, type Command } from '../command.js';
import { CONNECTION_USAGE, connectionOptions } from '../connection-options.js';
import { EXIT } from '../exit-codes.js';
import { getJson } from '../http-get.js';
import { formatTable, printError, printJson } from '../output.js';
import { httpBase } from '../server-url.js';

const USAGE = `Usage: dlm ls [--prefix P] [--server URL] [--json]

Lists held locks (name, holder, fencing token, remaining TTL, waiters on that server), from
the server's admin API (GET /v1/locks).

Options:
  --prefix P         only locks whose names start with P
${CONNECTION_USAGE}
                     (the admin API is on the server's host and port; with tokens, it needs
                     one with admin)
  --json             one JSON object: {"locks":[{"name","owner","token","ttlRemainingMs",
                     "mode","limit","holders","waiters"}]}
A lock held shared shows its newest holder and how many hold it of its limit: "w-2 (shared 2/3)".
  -h, --help         print this help

Exit status: 0, 1 when the server could not answer, 2 on a usage error.
`;

interface ListedLock {
  name: string;
  owner: string;
  token: string;
  ttlRemainingMs: number;
  waiters: number;
  /** From servers with shared modes. */
  mode?: 'exclusive' | 'shared';
  limit?: number;
  holders?: unknown[];
}

/** The OWNER column: the (highest-token) holder, and for a shared lock how many of its limit. */
function ownerCell(lock: ListedLock): string {
  if (lock.mode !== 'shared') return lock.owner;
  const count = lock.holders?.length ?? 1;
  return `${lock.owner} (shared ${count}/${lock.limit ?? '?'})`;
}

export const lsCommand: Command = {
  name: 'ls',
  usage: USAGE,
  async run(argv) {
    const { values, positionals } = parseFlags(
      argv,
      {
        ...COMMON_OPTIONS,
        prefix: { type: 'string' },
      },
      { allowPositionals: true },
    );
    if (values.help) {
      process.stdout.write(USAGE);
      return EXIT.OK;
    }
    if (positionals.length) throw new UsageError(`unexpected argument ${positionals[0]}`);
    const query = values.prefix ? `?prefix=${encodeURIComponent(values.prefix)}` : '';
    const connection = connectionOptions(values);
    const url = `${httpBase(connection.url)}/v1/locks${query}`;
    let body: { locks?: ListedLock[]; error?: { code: string; message: string } };
    try {
      body = (await getJson(url, connection, 10_000)).body as typeof body;
    } catch (error) {
      printError(new Error(`could not reach ${url}: ${(error as Error).message}`));
      return EXIT.FAILURE;
    }
    if (body.error || !body.locks) {
      printError(new Error(`${body.error?.message ?? 'unexpected answer'} (${body.error?.code})`));
      return EXIT.FAILURE;
    }
    if (values.json) {
      printJson({ locks: body.locks });
      return EXIT.OK;
    }
    if (!body.locks.length) {
      process.stdout.write(
        values.prefix ? `no locks held under ${values.prefix}\n` : 'no locks held\n',
      );
      return EXIT.OK;
    }
    process.stdout.write(
      formatTable(
        ['NAME', 'OWNER', 'TOKEN', 'TTL', 'WAITERS'],
        body.locks.map((lock) => [
          lock.name,
          ownerCell(lock),
          lock.token,
          formatDuration(lock.ttlRemainingMs),
          String(lock.waiters),
        ]),
        new Set([2, 3, 4]),
      ),
    );
    return EXIT.OK;
  },
};
