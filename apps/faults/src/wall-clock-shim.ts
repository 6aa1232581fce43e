import { execFileSync } from 'node:child_process';
import { openSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { tempDir } from '@dlm/test-services';

/**
 * Moves another process's wall clock: a small LD_PRELOAD library, compiled here with the
 * machine's C compiler, that adds an offset to `gettimeofday`, `clock_gettime(CLOCK_REALTIME…)`
 * and `time`, read from a file (at most every 10 ms). Redis reads its wall clock through these
 * for `TIME`, for key expiry and for its scripts, so a Redis started with the shim can have its
 * clock stepped back or forward while it runs, and nothing else on the machine is touched.
 * Monotonic clocks are left alone.
 */
const SOURCE = `
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int (*real_gettimeofday)(struct timeval *, void *);
static int (*real_clock_gettime)(clockid_t, struct timespec *);
static int fd = -2;
static volatile long long offset_us;
static volatile long long checked_at_ns = -1000000000LL;

static void init(void) {
  if (!real_gettimeofday) real_gettimeofday = dlsym(RTLD_NEXT, "gettimeofday");
  if (!real_clock_gettime) real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
}

static long long offset(void) {
  if (fd == -2) {
    const char *path = getenv("DLM_WALL_CLOCK_OFFSET_FILE");
    fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
  }
  if (fd < 0) return 0;
  struct timespec mono;
  real_clock_gettime(CLOCK_MONOTONIC, &mono);
  long long now = mono.tv_sec * 1000000000LL + mono.tv_nsec;
  if (now - checked_at_ns > 10000000LL) {
    char text[32] = {0};
    if (pread(fd, text, sizeof text - 1, 0) > 0) offset_us = strtoll(text, NULL, 10);
    checked_at_ns = now;
  }
  return offset_us;
}

int gettimeofday(struct timeval *tv, void *tz) {
  init();
  int result = real_gettimeofday(tv, tz);
  if (result == 0 && tv) {
    long long us = tv->tv_sec * 1000000LL + tv->tv_usec + offset();
    tv->tv_sec = us / 1000000LL;
    tv->tv_usec = us % 1000000LL;
  }
  return result;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
  init();
  int result = real_clock_gettime(id, ts);
  if (result == 0 && ts && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
    long long ns = ts->tv_sec * 1000000000LL + ts->tv_nsec + offset() * 1000LL;
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
  }
  return result;
}

time_t time(time_t *out) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  if (out) *out = tv.tv_sec;
  return tv.tv_sec;
}
`;

let built: string | null | undefined;

/** The shim's path, compiled once per process; null when no C compiler is on PATH. */
export function wallClockShim(): string | null {
  if (built !== undefined) return built;
  const dir = tempDir('wall-clock-shim');
  const source = join(dir, 'shim.c');
  const library = join(dir, 'libdlmwallclock.so');
  writeFileSync(source, SOURCE);
  try {
    execFileSync('cc', ['-shared', '-fPIC', '-O2', '-o', library, source, '-ldl'], {
      stdio: 'pipe',
    });
    built = library;
  } catch {
    built = null;
  }
  return built;
}

/** One process's (or several processes') wall-clock offset, as the shim reads it. */
export interface WallClockOffset {
  /** Environment for the process to start: the preload and the offset file. */
  env: Record<string, string>;
  /** Sets the offset (ms; negative: behind real time), seen within 10 ms. */
  set(offsetMs: number): void;
  readonly offsetMs: number;
}

export function createWallClockOffset(shim: string): WallClockOffset {
  const file = join(tempDir('wall-clock-offset'), 'offset');
  // Written in place (same 31 bytes, never truncated) so a read never sees an empty file.
  writeFileSync(file, `${'0'.padEnd(31, ' ')}\n`);
  const fd = openSync(file, 'r+');
  let current = 0;
  return {
    env: { LD_PRELOAD: shim, DLM_WALL_CLOCK_OFFSET_FILE: file },
    set(offsetMs) {
      current = offsetMs;
      writeSync(fd, String(Math.round(offsetMs * 1_000)).padEnd(31, ' '), 0);
    },
    get offsetMs() {
      return current;
    },
  };
}
