import { isDlmError } from '@dlm/client';
import { COMMON_OPTIONS, nameCommand } from '../command.js';
import { CONNECTION_USAGE, oneShotClient } from '../connection-options.js';
import { EXIT } from '../exit-codes.js';
import { printError, printJson } from '../output.js';

const USAGE = `Usage: dlm request-release NAME [--reason TEXT] [--server URL] [--json]

Asks every current holder of lock NAME to let go, on whichever server of the deployment it
holds it through (a dlm lock holder sends its command --on-release-request's signal, TERM by
default). Nothing is released by asking: the holders decide. An operator's revoke (the
dashboard's Revoke button, DELETE /v1/locks/NAME) is the forced form.

Options:
  --reason TEXT      why, passed to the holders (1-256 UTF-8 bytes)
${CONNECTION_USAGE}
  --json             one JSON object: {"name","notified"}
  -h, --help         print this help

Prints how many holders were asked (0: the lock was free).
Exit status: 0 (asked, or free), 1 when the server could not answer, 2 on a usage error.
`;

const OPTIONS = { ...COMMON_OPTIONS, reason: { type: 'string' } } as const;

export const requestReleaseCommand = nameCommand(
  'request-release',
  USAGE,
  async ({ values, name }) => {
    const client = oneShotClient(values);
    try {
      const asked = await client.requestRelease(
        name,
        values.reason === undefined ? {} : { reason: values.reason },
      );
      if (values.json) printJson(asked);
      else {
        const count = asked.notified;
        process.stdout.write(
          count === 0
            ? `${name}: free, nobody to ask\n`
            : `${name}: asked ${count} holder${count === 1 ? '' : 's'} to let go\n`,
        );
      }
      return EXIT.OK;
    } catch (error) {
      if (isDlmError(error, 'INVALID_PARAMS')) {
        // In the user's terms: the flag or argument, not the wire's field.
        const said = error.message.replace(/^reason/, '--reason').replace(/^name/, 'the lock NAME');
        process.stderr.write(`dlm request-release: ${said}\n`);
        return EXIT.USAGE;
      }
      printError(error);
      return EXIT.FAILURE;
    } finally {
      await client.close();
    }
  },
  OPTIONS,
);
