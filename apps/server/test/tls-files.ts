import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { findBinary, tempDir } from '@dlm/test-services';

export interface TestCertificates {
  /** The test CA's certificate: what a client trusts (`--ca`). */
  caFile: string;
  /** The server's certificate (for 127.0.0.1 and localhost), signed by the CA, and its key. */
  certFile: string;
  keyFile: string;
  ca: Buffer;
  cert: Buffer;
  key: Buffer;
}

export const opensslPath = findBinary('openssl');

/** A throwaway CA and a server certificate it signed, made by the `openssl` CLI now. */
export function makeCertificates(): TestCertificates {
  const dir = tempDir('tls');
  const at = (name: string) => join(dir, name);
  const openssl = (...args: string[]) =>
    execFileSync(opensslPath!, args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  openssl(
    'req',
    '-x509',
    ...ec,
    '-subj',
    '/CN=dlm test CA',
    '-days',
    '2',
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign',
    '-keyout',
    at('ca.key'),
    '-out',
    at('ca.pem'),
  );
  openssl(
    'req',
    ...ec,
    '-subj',
    '/CN=127.0.0.1',
    '-keyout',
    at('server.key'),
    '-out',
    at('server.csr'),
  );
  writeFileSync(
    at('server.ext'),
    'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n',
  );
  openssl(
    'x509',
    '-req',
    '-in',
    at('server.csr'),
    '-CA',
    at('ca.pem'),
    '-CAkey',
    at('ca.key'),
    '-CAcreateserial',
    '-days',
    '2',
    '-extfile',
    at('server.ext'),
    '-out',
    at('server.pem'),
  );
  return {
    caFile: at('ca.pem'),
    certFile: at('server.pem'),
    keyFile: at('server.key'),
    ca: readFileSync(at('ca.pem')),
    cert: readFileSync(at('server.pem')),
    key: readFileSync(at('server.key')),
  };
}
