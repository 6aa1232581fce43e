import { readFileSync, writeFileSync } from 'node:fs';
import { crc32 } from 'node:zlib';
import { createManualClock, type LockBackend } from '@dlm/core';
import { tempDir } from '@dlm/test-services';
import { describe, expect, it } from 'vitest';
import { parseJournal } from '../src/journal-format.js';
import { journalOf, useBackends } from './support.js';

const opened = useBackends();

const grantShared = async (
  backend: LockBackend,
  name: string,
  owner: string,
  limit: number,
  keyHash?: string,
  ttlMs = 60_000,
) => {
  const result = await backend.tryAcquire({ name, owner, ttlMs, mode: 'shared', limit, keyHash });
  if (!result.granted) throw new Error(`${name} was not granted to ${owner}`);
  return result.grant;
};

/**
 * A journal as the version before shared modes wrote it, built byte by byte from its format
 * (magic, then `u32 LE length | u32 LE crc32 | JSON array` frames), not with this version's
 * encoder, so a change to the reader that broke old files would show here.
 */
function oldFormatJournal(records: unknown[][]): Buffer {
  const parts = [Buffer.from('DLMJRNL1', 'latin1')];
  for (const record of records) {
    const payload = Buffer.from(JSON.stringify(record), 'utf8');
    const header = Buffer.alloc(8);
    header.writeUInt32LE(payload.length, 0);
    header.writeUInt32LE(crc32(payload), 4);
    parts.push(header, payload);
  }
  return Buffer.concat(parts);
}

describe('embedded backend shared modes across restarts (dataDir)', () => {
  it('keeps shared holders, their limit, tokens and key hashes across close and reopen', async () => {
    const dataDir = tempDir('embedded');
    const first = await opened({ dataDir, tokenBlockSize: 2 });
    const a = await grantShared(first, 's', 'alice', 3, 'ka');
    const b = await grantShared(first, 's', 'bob', 3, 'kb');
    const c = await grantShared(first, 's', 'carol', 3, 'kc');
    const x = await first.tryAcquire({ name: 'x', owner: 'xavier', ttlMs: 60_000, keyHash: 'kx' });
    expect(await first.release({ name: 's', token: b.token, keyHash: 'kb' })).toBe(true);
    expect(
      await first.extend({ name: 's', token: c.token, keyHash: 'kc', ttlMs: 120_000 }),
    ).not.toBeNull();
    // A refresh of alice's holder: same token, must not become a second holder.
    await grantShared(first, 's', 'alice', 3, 'ka');
    await first.close();

    const second = await opened({ dataDir, tokenBlockSize: 2 });
    const state = await second.inspect('s');
    expect(state).toMatchObject({ mode: 'shared', limit: 3, owner: 'carol', token: c.token });
    expect(state?.holders?.map((h) => [h.owner, h.token])).toEqual([
      ['alice', a.token],
      ['carol', c.token],
    ]);
    expect(state!.holders![1]!.ttlRemainingMs).toBeGreaterThan(119_000);
    expect(await second.inspect('x')).toMatchObject({ mode: 'exclusive', owner: 'xavier' });
    // The limit is still agreed on, and the key hashes still prove holding.
    expect(
      await second.tryAcquire({ name: 's', owner: 'dave', ttlMs: 1000, mode: 'shared', limit: 4 }),
    ).toEqual({ granted: false, conflict: { field: 'limit', limit: 3 } });
    expect(await second.release({ name: 's', token: a.token, keyHash: 'wrong' })).toBe(false);
    expect((await grantShared(second, 's', 'alice', 3, 'ka')).token).toBe(a.token);
    // New grants, in either mode, get tokens above every earlier one.
    const d = await grantShared(second, 's', 'dave', 3);
    expect(d.token).toBeGreaterThan(c.token);
    expect(x.granted && d.token > x.grant.token).toBe(true);
    const y = await second.tryAcquire({ name: 'y', owner: 'yann', ttlMs: 1000 });
    expect(y.granted && y.grant.token > d.token).toBe(true);
    // At the limit again (alice, carol, dave).
    expect(
      await second.tryAcquire({ name: 's', owner: 'erin', ttlMs: 1000, mode: 'shared', limit: 3 }),
    ).toMatchObject({ granted: false });
    expect(await second.release({ name: 's', token: a.token, keyHash: 'ka' })).toBe(true);
    await second.close();

    const third = await opened({ dataDir, tokenBlockSize: 2 });
    expect((await third.inspect('s'))?.holders?.map((h) => h.owner)).toEqual(['carol', 'dave']);
  });

  it('writes shared grants as their own record type, exclusive ones as before', async () => {
    const dataDir = tempDir('embedded');
    const backend = await opened({ dataDir });
    await grantShared(backend, 's', 'alice', 7, 'ka');
    await backend.tryAcquire({ name: 'x', owner: 'bob', ttlMs: 60_000, keyHash: 'kb' });
    const text = readFileSync(journalOf(dataDir)).toString('utf8');
    expect(text).toContain('["s","s","alice","1",60000,');
    expect(text).toMatch(/\["s","s","alice","1",60000,\d+,7,"ka"\]/);
    expect(text).toMatch(/\["g","x","bob","2",60000,\d+,"kb"\]/);
    const grants = parseJournal(readFileSync(journalOf(dataDir))).records.filter(
      (record) => record.type === 'grant',
    );
    expect(grants.map((g) => (g.type === 'grant' ? g.limit : null))).toEqual([7, undefined]);
  });

  it('recovers shared holders from a compacted snapshot', async () => {
    const dataDir = tempDir('embedded');
    const first = await opened({ dataDir, compactAfterBytes: 4_096 });
    const held = [
      await grantShared(first, 'sem', 'alice', 2, 'ka'),
      await grantShared(first, 'sem', 'bob', 2, 'kb'),
    ];
    let last = held[1]!.token;
    for (let i = 0; i < 400; i++) {
      const { token } = await grantShared(first, 'churn', `owner-${i}`, 5);
      last = token;
      await first.release({ name: 'churn', token });
    }
    await first.close();
    // The journal was compacted (it would be ~40 KB otherwise) and still holds the semaphore.
    expect(readFileSync(journalOf(dataDir)).length).toBeLessThan(8_192);
    const second = await opened({ dataDir, compactAfterBytes: 4_096 });
    expect(await second.inspect('sem')).toMatchObject({
      mode: 'shared',
      limit: 2,
      holders: [
        { owner: 'alice', token: held[0]!.token },
        { owner: 'bob', token: held[1]!.token },
      ],
    });
    expect(await second.inspect('churn')).toBeNull();
    expect((await grantShared(second, 'churn', 'x', 5)).token).toBeGreaterThan(last);
    expect(await second.release({ name: 'sem', token: held[1]!.token, keyHash: 'kb' })).toBe(true);
  });

  it('reads a journal written by the previous version: its leases are exclusive', async () => {
    const dataDir = tempDir('embedded');
    const wallMs = Date.now();
    writeFileSync(
      journalOf(dataDir),
      oldFormatJournal([
        ['h', '1000'],
        // A lease from before key hashes, one with a hash, one extended, one ended.
        ['g', 'legacy', 'alice', '5', 60_000, wallMs],
        ['g', 'hashed', 'bob', '6', 60_000, wallMs, 'kb'],
        ['g', 'extended', 'carol', '7', 1_000, wallMs],
        ['x', 'extended', '7', 90_000, wallMs],
        ['g', 'ended', 'dave', '8', 60_000, wallMs],
        ['e', 'ended', '8'],
        // Taken over by a new holder with a higher token: the newer grant wins.
        ['g', 'moved', 'erin', '9', 60_000, wallMs],
        ['g', 'moved', 'frank', '10', 60_000, wallMs],
      ]),
    );
    const logged: string[] = [];
    const backend = await opened({ dataDir, logger: (line) => logged.push(line) });
    expect(logged).toEqual([]);
    expect(await backend.inspect('legacy')).toMatchObject({
      owner: 'alice',
      token: 5n,
      mode: 'exclusive',
      holders: [{ owner: 'alice', token: 5n }],
    });
    expect((await backend.inspect('extended'))!.ttlRemainingMs).toBeGreaterThan(89_000);
    expect(await backend.inspect('ended')).toBeNull();
    expect(await backend.inspect('moved')).toMatchObject({ owner: 'frank', token: 10n });
    // An exclusive lease refuses shared requests, and the old key hash still proves holding.
    expect(
      await backend.tryAcquire({
        name: 'hashed',
        owner: 'zoe',
        ttlMs: 1000,
        mode: 'shared',
        limit: 3,
      }),
    ).toMatchObject({ granted: false });
    expect(await backend.release({ name: 'hashed', token: 6n, keyHash: 'nope' })).toBe(false);
    expect(await backend.release({ name: 'hashed', token: 6n, keyHash: 'kb' })).toBe(true);
    // The old high-water mark holds for both modes.
    expect((await grantShared(backend, 'hashed', 'zoe', 3)).token).toBeGreaterThan(1000n);
  });

  it('drops on reopen a shared holder whose whole TTL passed, keeping the others', async () => {
    const dataDir = tempDir('embedded');
    const first = await opened({ dataDir });
    await grantShared(first, 's', 'short', 2, undefined, 50);
    const long = await grantShared(first, 's', 'long', 2, undefined, 60_000);
    await first.close();
    await new Promise((resolve) => setTimeout(resolve, 120));
    const second = await opened({ dataDir });
    expect((await second.inspect('s'))?.holders?.map((h) => h.token)).toEqual([long.token]);
    // Room for one more under the same limit.
    await grantShared(second, 's', 'next', 2);
  });

  it('never reports a shared grant or extend whose lease ran out while its record was synced', async () => {
    const dataDir = tempDir('embedded');
    // The leases' clock is manual; the journal's disk I/O takes real time.
    const clock = createManualClock();
    const backend = await opened({ dataDir, clock });
    const long = await grantShared(backend, 's', 'long', 3, 'kl', 1000);
    const pending = backend.tryAcquire({
      name: 's',
      owner: 'short',
      ttlMs: 5,
      mode: 'shared',
      limit: 3,
      keyHash: 'ks',
    });
    // Synchronously, so before the batch with the grant's record is on disk.
    clock.advance(10);
    // The grant ended; the name is still held by `long`, whose remaining lease is reported.
    expect(await pending).toEqual({ granted: false, ttlRemainingMs: 990 });
    const extended = backend.extend({ name: 's', token: long.token, keyHash: 'kl', ttlMs: 5 });
    clock.advance(10);
    expect(await extended).toBeNull();
    expect(await backend.inspect('s')).toBeNull();
  });
});
