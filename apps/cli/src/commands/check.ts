import { UsageError } from '@dlm/flags';
import { COMMON_OPTIONS, type Command, parseCommandArgs } from '../command.js';
import { CONNECTION_USAGE, oneShotClient } from '../connection-options.js';
import { EXIT } from '../exit-codes.js';
import { printError, printJson } from '../output.js';

const USAGE = `Usage: dlm check NAME TOKEN [--server URL] [--json]

Asks whether a lease with fencing token TOKEN holds lock NAME now (for a lock held shared:
whether TOKEN is among its holders), on any server of the deployment. For a resource that
cannot store a token but can ask before it acts: a holder paused past its lease is told no.

Options:
${CONNECTION_USAGE}
  --json             one JSON object: {"name","token","current"}
  -h, --help         print this help

Exit status: 0 when the lease is current, 1 when it is not, 2 on a usage error (a malformed
TOKEN included), 125 when the server could not answer.
`;

/** NAME and TOKEN, the two positionals, or a usage error naming what is missing or extra. */
function nameAndToken(positionals: string[]): { name: string; token: string } {
  if (positionals.length < 2) {
    throw new UsageError(
      positionals.length === 0 ? 'a lock NAME is missing' : 'a TOKEN is missing',
    );
  }
  if (positionals.length > 2) throw new UsageError('one lock NAME and one TOKEN at a time');
  return { name: positionals[0]!, token: positionals[1]! };
}

export const checkCommand: Command = {
  name: 'check',
  usage: USAGE,
  async run(argv) {
    const parsed = parseCommandArgs(USAGE, argv, COMMON_OPTIONS);
    if (!parsed) return EXIT.OK;
    const { values, positionals } = parsed;
    const { name, token } = nameAndToken(positionals);
    if (!/^[1-9][0-9]{0,18}$/.test(token)) {
      throw new UsageError(
        `TOKEN must be a fencing token (a positive decimal integer), not ${JSON.stringify(token)}`,
      );
    }
    const client = oneShotClient(values);
    try {
      const current = await client.check(name, token);
      if (values.json) printJson({ name, token, current });
      else
        process.stdout.write(
          `${name}: token ${token} ${current ? 'holds it' : 'does not hold it'}\n`,
        );
      return current ? EXIT.OK : EXIT.NOT_CURRENT;
    } catch (error) {
      printError(error);
      return EXIT.DLM_ERROR;
    } finally {
      await client.close();
    }
  },
};
