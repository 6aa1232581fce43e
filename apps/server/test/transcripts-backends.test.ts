import { serverConfigurations } from './server-configurations.js';
import { replayTranscripts } from './transcript-replays.js';

// The golden transcripts on the external backends (the embedded ones: transcripts.test.ts).
replayTranscripts(serverConfigurations().filter((configuration) => !configuration.embedded));
