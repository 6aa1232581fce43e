export {
  type PostgresBackend,
  type PostgresBackendOptions,
  postgresBackend,
} from './postgres-backend.js';
