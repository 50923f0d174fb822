// Starts fauxqs (installed under the directory given as the first
// argument) on a free loopback port, prints {"port": N} on one line, and
// exits when stdin closes (the Go test that started it ended).
import { register } from "node:module";
import { pathToFileURL } from "node:url";
import path from "node:path";

if (!process.versions.node.match(/^(2[3-9]|[3-9]\d)\./) && !/^22\.([5-9]|\d\d)\./.test(process.versions.node)) {
  register("./hooks.mjs", import.meta.url);
}
const dir = process.argv[2];
const { startFauxqs } = await import(pathToFileURL(path.join(dir, "node_modules", "fauxqs", "dist", "app.js")).href);
const srv = await startFauxqs({ port: 0, host: "127.0.0.1", logger: false, defaultRegion: "us-east-1" });
process.stdout.write(JSON.stringify({ port: srv.port }) + "\n");
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
