// Module hooks for fauxqs on Node.js before 22.5: fauxqs imports
// node:sqlite for its optional persistence (dataDir), which walpost's
// tests never turn on. The stub refuses to be used.
export async function resolve(specifier, context, next) {
  if (specifier === "node:sqlite") return { url: "walpost-stub:sqlite", shortCircuit: true };
  return next(specifier, context);
}

export async function load(url, context, next) {
  if (url === "walpost-stub:sqlite") {
    return {
      format: "module",
      shortCircuit: true,
      source: "export class DatabaseSync { constructor() { throw new Error('fauxqs persistence needs Node.js 22.5 or later (node:sqlite)'); } }",
    };
  }
  return next(url, context);
}
