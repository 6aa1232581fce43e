#!/usr/bin/env node
import { runServer } from './run.js';

await runServer(process.argv.slice(2));
