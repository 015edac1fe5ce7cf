// Build a JavaScript module into a rollbox component with componentize-js 0.23 (through its
// `componentize()` API; the `jco componentize` CLI of jco 1.35 fails on this machine).
//
//   node scripts/guests/build-js-component.mjs WORLD SOURCE.js OUT.wasm
//
// WORLD is `workflow`, `reward` or `tool` (wit/worlds.wit). Rewards and tools keep only stdio
// (an uncaught exception is printed to the captured stderr before the trap); workflows keep
// the clocks and random numbers, which the host provides per episode, and not stdio.
// To return the `err` case of a `result`, throw an Error whose `payload` is the error value. The packages come from
// `scripts/install/js-toolchain.sh` (~/.cache/rollbox/js-*), found through NODE_PATH.
import { readFile, writeFile } from 'node:fs/promises';
import { basename, dirname, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const [world, source, out] = process.argv.slice(2);
if (!world || !source || !out || !['workflow', 'reward', 'tool'].includes(world)) {
  console.error('usage: node scripts/guests/build-js-component.mjs workflow|reward|tool SOURCE.js OUT.wasm');
  process.exit(2);
}
const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const modules = process.env.NODE_PATH || resolve(root, 'node_modules');
const entry = resolve(modules, '@bytecodealliance/componentize-js/src/componentize.js');
const { componentize } = await import(pathToFileURL(entry).href);
const disableFeatures = world === 'workflow'
  ? ['stdio', 'http', 'fetch-event']
  : ['random', 'clocks', 'http', 'fetch-event'];
const { component } = await componentize(await readFile(source, 'utf8'), {
  sourceName: basename(source),
  witPath: resolve(root, 'wit'),
  worldName: world,
  disableFeatures,
});
await writeFile(out, component);
console.log(`${out}: ${component.length} bytes`);
