export {
  FENCED_TABLE_SQL,
  FENCED_UPDATE_SQL,
  FENCED_UPSERT_SQL,
  fencedWrite,
  type Queryable,
} from './postgres-fence.js';
export {
  type Evaluator,
  FENCED_HSET_LUA,
  type FencedWriteResult,
  fencedHset,
} from './redis-fence.js';
