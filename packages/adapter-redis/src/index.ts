export { type RedisBackend, type RedisBackendOptions, redisBackend } from './redis-backend.js';
