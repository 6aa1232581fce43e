export { type EmbeddedBackendOptions, embeddedBackend } from './embedded-backend.js';
