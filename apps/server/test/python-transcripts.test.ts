import { replayFromPython } from './python-runner.js';
import { serverConfigurations } from './server-configurations.js';

// The Python client's transcript runner on the external backends (the embedded ones and the
// whole suite: python-client.test.ts).
replayFromPython(serverConfigurations().filter((configuration) => !configuration.embedded));
