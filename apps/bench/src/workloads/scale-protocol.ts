/** Messages between the scale workload and its client processes (`scale-worker.ts`), over IPC. */

/** A lease a worker holds, with its token in decimal (bigints do not cross IPC). */
export interface HeldSample {
  name: string;
  token: string;
}

export type ToWorker =
  /** `localAddress`: the source address of the worker's connections (127.0.0.2, …). */
  | { type: 'connect'; url: string; sessions: number; localAddress?: string }
  | { type: 'acquire'; count: number; ttlMs: number; prefix: string };

export type FromWorker =
  | { type: 'connected'; ok: number; failed: number; error?: string }
  /** `sample`: the last lease this worker got, for the recovery step to look up. */
  | { type: 'acquired'; ok: number; failed: number; error?: string; sample?: HeldSample };
