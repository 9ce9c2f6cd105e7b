// One Node process for all of tests/bench_site.py's Lighthouse runs (node lighthouse_worker.mjs
// LIGHTHOUSE_PACKAGE_DIR). Each line on stdin is a JSON list: the arguments of one `lighthouse`
// command line. Each is parsed and run by the CLI's own code (cli/cli-flags.js, cli/run.js), so
// each run still launches a fresh Chromium and writes its report and artifacts where the flags
// say; only Node's start and Lighthouse's loading happen once instead of twice a run (about
// 9 s of the 17 s a run took). Answers one line per request: "ok", or "error: ..." when the
// run threw; a run the CLI itself gives up on ends this process, as it ends the CLI.
import path from 'node:path';
import {createInterface} from 'node:readline';
import {createRequire} from 'node:module';
import {pathToFileURL} from 'node:url';

const root = process.argv[2];
const load = file => import(pathToFileURL(path.join(root, file)).href);
const {getFlags} = await load('cli/cli-flags.js');
const {runLighthouse} = await load('cli/run.js');
const log = (await import(pathToFileURL(
  createRequire(path.join(root, 'package.json')).resolve('lighthouse-logger')).href)).default;

for await (const line of createInterface({input: process.stdin})) {
  try {
    const flags = getFlags(JSON.parse(line));
    flags.logLevel = 'silent';  // as --quiet does in cli/bin.js
    log.setLevel(flags.logLevel);
    flags.enableErrorReporting = false;  // never ask, never report
    await runLighthouse(flags._[0], flags, undefined);
    process.stdout.write('ok\n');
  } catch (err) {
    process.stdout.write(`error: ${String(err && err.stack || err).replace(/\n/g, ' | ')}\n`);
  }
}
