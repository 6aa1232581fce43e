import type { FileHandle } from 'node:fs/promises';
import { mkdir, open, readFile, rename, rm } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { type Clock, DlmError, systemClock, type Timer, toUnavailable } from '@dlm/core';
import { lockDataDir } from './data-dir-lock.js';
import { readHighWater, writeHighWater } from './high-water-file.js';
import {
  encodeRecord,
  frameRecords,
  JOURNAL_MAGIC,
  type JournalRecord,
  parseJournal,
} from './journal-format.js';
import { syncDir } from './sync-dir.js';

/**
 * The append-only journal that makes the embedded backend durable.
 *
 * Records are appended to the current batch; one batch is written with one `write` and one
 * `datasync` (group commit): the records of one event-loop turn, or of `flushIntervalMs`, and
 * everything that arrives while the previous batch is being synced. `append` returns the
 * batch's promise, which settles only once the batch is on disk, so the backend can hold a
 * reply back until its record is durable.
 */
export interface Journal {
  /**
   * What the files said at open: leases as last journaled, and the highest token seen. The
   * backend empties `leases` once it has taken them over.
   */
  readonly recovered: RecoveredState;
  /** Adds a record to the current batch; resolves when that batch is durable. */
  append(record: JournalRecord): Promise<void>;
  /** Resolves once every record appended so far is durable; undefined when they all are. */
  synced(): Promise<void> | undefined;
  /**
   * Persists "tokens up to `token` may be handed out" (journal and high-water file) in the
   * current batch, and returns that batch's promise.
   */
  reserve(token: bigint): Promise<void>;
  /** Set once a write failed: the journal is no longer trustworthy and takes no more records. */
  readonly failure: DlmError | undefined;
  /** Flushes what is pending, then closes the files and releases the data dir. */
  close(): Promise<void>;
}

export interface RecoveredLease {
  name: string;
  owner: string;
  token: bigint;
  keyHash?: string | undefined;
  /** The remaining lease when last journaled… */
  ttlMs: number;
  /** …and the wall-clock time (`Date.now()`) of that record. */
  wallMs: number;
  /** Present: a `shared` holder, and the limit of its name. */
  limit?: number | undefined;
  /** Present: the lease's cap on holding, on the wall clock. */
  capWallMs?: number | undefined;
}

/** A name's holders as last journaled: its one exclusive lease, or its shared ones by token. */
export type RecoveredHolders = RecoveredLease | Map<bigint, RecoveredLease>;

/** A name's lock-delay as last journaled: it runs until `ms` after `wallMs`. */
export interface RecoveredDelay {
  /** The lease that keeps it (a release by that lease ends it). */
  token: bigint;
  /** The lease's own delay (a later extend of it starts from its new end). */
  delayMs: number;
  ms: number;
  wallMs: number;
}

export interface RecoveredState {
  leases: Map<string, RecoveredHolders>;
  /** Lock-delays as last journaled, by name (those that ended are dropped at recovery). */
  delays: Map<string, RecoveredDelay>;
  /** No token above this was ever handed out (0n for a new data dir). */
  highWater: bigint;
}

export interface JournalOptions {
  dataDir: string;
  flushIntervalMs: number;
  commandTimeoutMs: number;
  compactAfterBytes: number;
  log: (line: string) => void;
  /**
   * The records that rebuild the current state (high-water mark first, then every held lease),
   * for compaction. Called synchronously, so it sees everything appended so far.
   */
  snapshot: () => JournalRecord[];
  /** Times batch deadlines and flush intervals. Default `systemClock`. */
  clock?: Clock;
}

interface Batch {
  payloads: string[];
  promise: Promise<void>;
  resolve: () => void;
  reject: (error: DlmError) => void;
  timer: Timer | undefined;
}

const JOURNAL_FILE = 'journal.log';
const SNAPSHOT_CHUNK_RECORDS = 2_000;
const HIGH_WATER_FILE = 'highwater';

export async function openJournal(options: JournalOptions): Promise<Journal> {
  const dir = resolve(options.dataDir);
  const log = options.log;
  await mkdir(dir, { recursive: true });
  const unlockDir = await lockDataDir(dir);
  try {
    return await openLocked(dir, options, unlockDir);
  } catch (error) {
    await unlockDir();
    throw toUnavailable(error, `cannot open the journal in ${dir}`);
  }

  async function openLocked(
    dir: string,
    options: JournalOptions,
    unlockDir: () => Promise<void>,
  ): Promise<Journal> {
    const journalPath = join(dir, JOURNAL_FILE);
    const highWaterPath = join(dir, HIGH_WATER_FILE);
    // Leftovers of a compaction or high-water write that a crash interrupted; the files they
    // were to replace are intact.
    await rm(`${journalPath}.tmp`, { force: true });
    await rm(`${highWaterPath}.tmp`, { force: true });

    let highWater = 0n;
    const fromFile = await readHighWater(highWaterPath);
    if ('token' in fromFile) highWater = fromFile.token;
    else log(`[dlm embedded] high-water file ${highWaterPath}: ${fromFile.problem}; ignoring it`);

    const data = await readFile(journalPath).catch((error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT') return undefined;
      throw error;
    });
    const parsed = parseJournal(data ?? Buffer.alloc(0));
    const leases = new Map<string, RecoveredHolders>();
    const delays = new Map<string, RecoveredDelay>();
    for (const record of parsed.records) {
      switch (record.type) {
        case 'grant': {
          const held = leases.get(record.name);
          if (record.limit === undefined) {
            // Exclusive: the name was free (its earlier holders' ends came first), or this is
            // the one holder's refresh.
            leases.set(record.name, { ...record });
          } else if (held instanceof Map && sharedLimit(held) === record.limit) {
            held.set(record.token, { ...record });
          } else {
            leases.set(record.name, new Map([[record.token, { ...record }]]));
          }
          if (record.token > highWater) highWater = record.token;
          break;
        }
        case 'extend': {
          const held = leases.get(record.name);
          const lease = held instanceof Map ? held.get(record.token) : held;
          if (lease?.token === record.token) {
            lease.ttlMs = record.ttlMs;
            lease.wallMs = record.wallMs;
          }
          break;
        }
        case 'end': {
          const held = leases.get(record.name);
          if (held instanceof Map) {
            if (held.delete(record.token) && held.size === 0) leases.delete(record.name);
          } else if (held?.token === record.token) {
            leases.delete(record.name);
          }
          break;
        }
        case 'high-water':
          if (record.token > highWater) highWater = record.token;
          break;
        case 'cap': {
          const held = leases.get(record.name);
          const lease = held instanceof Map ? held.get(record.token) : held;
          if (lease?.token === record.token) lease.capWallMs = record.capWallMs;
          break;
        }
        case 'delay':
          if (record.ms > 0) {
            const { token, ms, wallMs, delayMs } = record;
            delays.set(record.name, { token, ms, wallMs, delayMs });
          } else delays.delete(record.name);
          break;
      }
    }

    let handle: FileHandle;
    let size: number;
    if (data === undefined || parsed.validBytes === 0) {
      if (parsed.problem !== undefined) {
        log(
          `[dlm embedded] journal ${journalPath}: ${parsed.problem}; discarded all ${data!.length} bytes and started an empty journal (tokens continue above ${highWater})`,
        );
      }
      handle = await open(journalPath, 'w+');
      size = await writeAll(handle, JOURNAL_MAGIC, 0);
      await handle.sync();
      await syncDir(journalPath);
    } else {
      handle = await open(journalPath, 'r+');
      size = parsed.validBytes;
      if (parsed.problem !== undefined) {
        log(
          `[dlm embedded] journal ${journalPath}: ${parsed.problem} at byte ${parsed.validBytes} of ${data.length}; kept the valid prefix (${parsed.records.length} records) and truncated the rest`,
        );
        await handle.truncate(size);
        await handle.sync();
      }
    }

    return createJournal({
      options,
      journalPath,
      highWaterPath,
      handle,
      size,
      recovered: { leases, delays, highWater },
      unlockDir,
    });
  }
}

interface JournalInit {
  options: JournalOptions;
  journalPath: string;
  highWaterPath: string;
  handle: FileHandle;
  size: number;
  recovered: RecoveredState;
  unlockDir: () => Promise<void>;
}

function createJournal(init: JournalInit): Journal {
  return new FileJournal(init);
}

/** The journal's files and its batches (see `Journal`). */
class FileJournal implements Journal {
  readonly recovered: RecoveredState;
  private readonly options: JournalOptions;
  private readonly journalPath: string;
  private readonly highWaterPath: string;
  private readonly unlockDir: () => Promise<void>;
  /** Disk I/O takes real time, whatever clock the backend's leases run on. */
  private readonly clock: Clock;
  private handle: FileHandle;
  private size: number;
  private compactAt: number;
  private failed: DlmError | undefined;
  private scheduled = false;
  private flushing: Promise<void> | undefined;
  private closed = false;
  /** The high-water mark the current batch must persist, and the one already on disk. */
  private highWaterWanted: bigint;
  private highWaterOnDisk: bigint;
  private current: Batch;
  /** The batch of the last record appended, until its write ends (then undefined). */
  private unsynced: Batch | undefined;

  constructor(init: JournalInit) {
    this.options = init.options;
    this.journalPath = init.journalPath;
    this.highWaterPath = init.highWaterPath;
    this.recovered = init.recovered;
    this.unlockDir = init.unlockDir;
    this.clock = init.options.clock ?? systemClock;
    this.handle = init.handle;
    this.size = init.size;
    this.compactAt = init.options.compactAfterBytes;
    this.highWaterWanted = init.recovered.highWater;
    this.highWaterOnDisk = init.recovered.highWater;
    this.current = this.newBatch();
  }

  get failure(): DlmError | undefined {
    return this.failed;
  }

  reserve(token: bigint): Promise<void> {
    if (token > this.highWaterWanted) this.highWaterWanted = token;
    return this.append({ type: 'high-water', token });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    // `run` loops until nothing is pending; a batch scheduled but not started runs now.
    while (this.flushing !== undefined || this.current.payloads.length > 0) {
      await this.startFlush();
      if (this.failed !== undefined) break;
    }
    await this.handle.close().catch(() => {});
    await this.unlockDir();
  }

  private newBatch(): Batch {
    let resolveBatch!: () => void;
    let rejectBatch!: (error: DlmError) => void;
    const promise = new Promise<void>((res, rej) => {
      resolveBatch = res;
      rejectBatch = rej;
    });
    // Batches that only carry expiry records have nobody waiting on them.
    promise.catch(() => {});
    const batch: Batch = {
      payloads: [],
      promise,
      resolve: resolveBatch,
      reject: rejectBatch,
      timer: undefined,
    };
    return batch;
  }

  private armTimeout(batch: Batch) {
    if (batch.timer !== undefined) return;
    // A disk that stalls must not stall callers forever: they get UNAVAILABLE (indeterminate,
    // since the record may still land) while the write carries on.
    batch.timer = this.clock.setTimer(() => {
      batch.reject(
        new DlmError(
          'UNAVAILABLE',
          `the embedded journal did not sync within ${this.options.commandTimeoutMs} ms`,
          { indeterminate: true },
        ),
      );
    }, this.options.commandTimeoutMs);
  }

  private settle(batch: Batch, error?: DlmError) {
    // Not at the time-out: until the write really ends, reads fail at once (the promise is
    // rejected) instead of reporting what may not be on disk.
    if (this.unsynced === batch) this.unsynced = undefined;
    batch.timer?.cancel();
    if (error === undefined) batch.resolve();
    else batch.reject(error);
  }

  private fail(error: unknown): DlmError {
    if (this.failed === undefined) {
      this.failed = toUnavailable(error, 'the embedded journal could not be written', true);
      this.options.log(
        `[dlm embedded] journal ${this.journalPath}: ${this.failed.message}; refusing writes`,
      );
    }
    return this.failed;
  }

  private async writeHighWaterIfWanted() {
    const wanted = this.highWaterWanted;
    if (wanted <= this.highWaterOnDisk) return;
    await writeHighWater(this.highWaterPath, wanted);
    if (wanted > this.highWaterOnDisk) this.highWaterOnDisk = wanted;
  }

  private async writeBatch(batch: Batch) {
    const buffer = frameRecords(batch.payloads);
    await Promise.all([
      (async () => {
        await writeAll(this.handle, buffer, this.size);
        await this.handle.datasync();
      })(),
      this.writeHighWaterIfWanted(),
    ]);
    this.size += buffer.length;
  }

  /**
   * Replaces the journal with a snapshot of the current state. The batch that accumulated since
   * the last write is subsumed by the snapshot (taken now, it already reflects those records),
   * so its waiters are released when the snapshot is durable.
   */
  private async compact() {
    const batch = this.current;
    this.current = this.newBatch();
    // Captured synchronously (a consistent point in time), encoded and written in chunks: at
    // 100,000 leases encoding it all at once would stall the event loop for a few hundred ms.
    const records = this.options.snapshot();
    const tempPath = `${this.journalPath}.tmp`;
    let next: FileHandle | undefined;
    let written = 0;
    try {
      next = await open(tempPath, 'w+');
      const target = next;
      await Promise.all([
        (async () => {
          written = await writeAll(target, JOURNAL_MAGIC, 0);
          for (let i = 0; i < records.length; i += SNAPSHOT_CHUNK_RECORDS) {
            const chunk = records.slice(i, i + SNAPSHOT_CHUNK_RECORDS).map(encodeRecord);
            written += await writeAll(target, frameRecords(chunk), written);
          }
          await target.sync();
        })(),
        this.writeHighWaterIfWanted(),
      ]);
      await rename(tempPath, this.journalPath);
      await syncDir(this.journalPath);
    } catch (error) {
      await next?.close().catch(() => {});
      this.settle(batch, toUnavailable(error, 'the embedded journal could not be compacted', true));
      throw error;
    }
    const previous = this.handle;
    this.handle = next;
    this.size = written;
    this.compactAt = Math.max(this.options.compactAfterBytes, 4 * this.size);
    await previous.close().catch(() => {});
    this.settle(batch);
  }

  private async run() {
    while (this.failed === undefined && this.current.payloads.length > 0) {
      const batch = this.current;
      this.current = this.newBatch();
      try {
        await this.writeBatch(batch);
      } catch (error) {
        this.settle(batch, this.fail(error));
        break;
      }
      this.settle(batch);
      if (this.size >= this.compactAt) {
        try {
          await this.compact();
        } catch (error) {
          this.fail(error);
        }
      }
    }
    if (this.failed !== undefined && this.current.payloads.length > 0) {
      const batch = this.current;
      this.current = this.newBatch();
      this.settle(batch, this.failed);
    }
  }

  /** Runs the flush loop unless it runs already; one loop at a time keeps writes in order. */
  private startFlush(): Promise<void> {
    if (this.flushing === undefined) {
      this.flushing = this.run().finally(() => {
        this.flushing = undefined;
        // Records appended after the loop's last look at the batch.
        if (this.current.payloads.length > 0) this.schedule();
      });
    }
    return this.flushing;
  }

  private schedule() {
    if (this.scheduled || this.flushing !== undefined) return;
    this.scheduled = true;
    const start = () => {
      this.scheduled = false;
      void this.startFlush();
    };
    // setImmediate runs after the I/O of this loop turn, so everything that turn produced
    // shares one write and one fsync.
    if (this.options.flushIntervalMs > 0) this.clock.setTimer(start, this.options.flushIntervalMs);
    else setImmediate(start);
  }

  append(record: JournalRecord): Promise<void> {
    if (this.failed !== undefined) {
      const rejected = Promise.reject(this.failed);
      rejected.catch(() => {});
      return rejected;
    }
    const batch = this.current;
    batch.payloads.push(encodeRecord(record));
    this.armTimeout(batch);
    this.schedule();
    this.unsynced = batch;
    return batch.promise;
  }

  /**
   * Batches are written in order, so the last one's promise covers every record before it. A
   * read waits for it, so that nothing it reports (a free name, a holder) can be taken back by
   * a crash: until then, a released lease could come back.
   */
  synced(): Promise<void> | undefined {
    return this.unsynced?.promise;
  }
}

/** The limit of a name's recovered shared holders (they all agree on it). */
function sharedLimit(holders: Map<bigint, RecoveredLease>): number | undefined {
  for (const lease of holders.values()) return lease.limit;
  return undefined;
}

async function writeAll(handle: FileHandle, buffer: Buffer, position: number): Promise<number> {
  let written = 0;
  while (written < buffer.length) {
    const { bytesWritten } = await handle.write(
      buffer,
      written,
      buffer.length - written,
      position + written,
    );
    written += bytesWritten;
  }
  return written;
}
